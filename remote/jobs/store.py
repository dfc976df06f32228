"""Job records on the instance: new ids, finding a job by id, prefix or name, the list, and what a
record means now (``live_status``: a job whose supervisor is gone is ``lost``; ``mark_lost`` keeps it).

Submitting and resuming are in remote/jobs/submit.py and remote/jobs/resume.py; the documents a
reader sees (status, ls, watch) are built in remote/view/.
"""

import os
import time
from typing import Any, Dict, List

from remote.core import locks, procs
from remote.core.errors import AgentError
from remote.core.layout import JobDir, Root, agent_log, now
from remote.core.protocol import TERMINAL
from remote.jobs import index as jobindex


def stale_after() -> float:
    """Seconds without a heartbeat after which a record is stale (read at each look: ``agent.env`` may set it)."""
    return float(os.environ.get("GPUJOB_STALE_AFTER", "30"))


def heartbeat_age(st: Dict[str, Any]) -> float:
    """Seconds since the supervisor last wrote the record (since the submit, before its first beat)."""
    return now() - float(st.get("heartbeat") or st.get("submitted_at") or 0)


def new_job_id(name: str) -> str:
    import random  # a submit's alone: every status imports this module
    import string

    suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(5))
    return "{}-{}-{}".format(name[:40], time.strftime("%m%d%H%M"), suffix)


def all_job_ids(root: Root) -> List[str]:
    """Every job, in submit order (from the job index: no status.json is read)."""
    return jobindex.read(root)[0]


def resolve(root: Root, ref: str) -> str:
    """A job id from an id, a unique prefix, or a job name (its newest job)."""
    if not ref.strip():  # an empty reference would be a prefix of every id
        raise AgentError("no job given", "name a job: gpujob ls lists them", "not_found")
    ids, names, _ = jobindex.read(root)
    if ref in ids:
        return ref
    if ref in ("last", "latest", "@") and ids:
        return ids[-1]
    named = [i for i in ids if names.get(i) == ref]
    if named:
        return named[-1]
    matches = [i for i in ids if i.startswith(ref) or i.rsplit("-", 1)[-1].startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise AgentError("no job matches {!r} on this host".format(ref), "list the jobs with: gpujob ls", "not_found")
    raise AgentError("{!r} matches {} jobs: {}".format(ref, len(matches), ", ".join(matches[-5:])),
                     "give more of the id", "ambiguous")


def live_status(root: Root, job: JobDir, boot: str) -> Dict[str, Any]:
    """status.json plus what a reader concludes: ``lost`` when the supervisor is gone."""
    st = job.status()
    state = st.get("state")
    if state not in TERMINAL:
        sup = st.get("supervisor_pid")
        stale = heartbeat_age(st) > stale_after()
        rebooted = bool(st.get("boot_id")) and st.get("boot_id") != boot
        # a named supervisor (submit and resume name the one they start) that is gone and holds
        # no lock is proof (a kill -9): no need to wait for the heartbeat to age
        if rebooted or ((stale or bool(sup)) and not procs.belongs_to(sup, job.id) and not locks.supervisor_alive(job.path)):
            st["state"] = "lost"
            st["lost_reason"] = "the instance rebooted" if rebooted else "the agent is gone (stale heartbeat)"
            left = [] if rebooted else sorted(procs.job_pids(job.id, job_dir=str(job.path)))
            if left:
                st["lost_reason"] += "; {} process(es) of the job still run: stop ends them, resume restarts " \
                                     "from the newest checkpoint".format(len(left))
    return st


def mark_lost(root: Root, job: JobDir, st: Dict[str, Any]) -> None:
    """Persist a ``lost`` conclusion (so the record stops claiming to run)."""
    try:
        with locks.job_lock(job.path):
            fresh = job.status()  # judged again under the lock: a resume may have just restarted it
            if fresh.get("state") not in TERMINAL and live_status(root, job, procs.boot_id()).get("state") == "lost":
                fresh.update(state="lost", lost_reason=st.get("lost_reason"), ended_at=now())
                job.write_status(fresh)
                job.event("state", state="lost", reason=st.get("lost_reason"))
    except OSError as e:  # a full disk: the reader still gets its answer, the record waits
        agent_log(root, "could not record {} as lost: {}".format(job.id, e))
