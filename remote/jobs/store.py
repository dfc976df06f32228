"""Job records on the instance: new ids, finding a job by id, prefix or name, the list, and what a
record means now (``live_status``: the rule of remote/core/liveness.py applied; ``mark_lost`` keeps a ``lost``).

Submitting and resuming are in remote/jobs/submit.py and remote/jobs/resume.py; the documents a
reader sees (status, ls, watch) are built in remote/view/.
"""

import time
from typing import List, Tuple

from remote.core import locks, procs
from remote.core.errors import AgentError
from remote.core.jobrecord import JobRecord
from remote.core.layout import JobDir, Root, agent_log, now
from remote.core.liveness import SlurmVerdict, Verdict, liveness
from remote.core.protocol import LOST, TERMINAL
from remote.jobs import index as jobindex


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


def judged(root: Root, job: JobDir, boot: str) -> Tuple[JobRecord, Verdict]:
    """The job's record as a reader concludes it (``lost`` when nothing runs it: remote/core/liveness.py)
    and the verdict it was concluded by."""
    rec = job.record()
    verdict = liveness(job, rec, boot)
    state = verdict.state
    if state != rec.state:  # concluded, not recorded: lost, or Slurm's word (pending, cancelled there)
        rec.update(state=state)
        if state == LOST:
            rec.update(lost_reason=verdict.lost_reason)
        elif state in TERMINAL:  # Slurm's end: its words, not the supervisor's last (a requeue it expected)
            rec.update(reason=verdict.lost_reason or rec.reason)
    if isinstance(verdict, SlurmVerdict) and verdict.recorded not in TERMINAL:
        rec.doc["slurm"] = verdict.said()
    return rec, verdict


def live_status(root: Root, job: JobDir, boot: str) -> JobRecord:
    """status.json plus what a reader concludes: ``lost`` when the supervisor is gone."""
    return judged(root, job, boot)[0]


def mark_lost(root: Root, job: JobDir, st: JobRecord) -> None:
    """Persist an end concluded rather than recorded (``lost``; a job Slurm ended without its agent:
    cancelled there, its time limit), so the record stops claiming to run."""
    try:
        with locks.job_lock(job.path):
            fresh = job.record()  # judged again under the lock: a resume may have just restarted it
            ended = liveness(job, fresh, procs.boot_id()).state if fresh.state not in TERMINAL else None
            if ended == LOST:
                fresh.update(state=LOST, lost_reason=st.lost_reason, ended_at=now())
            elif ended in TERMINAL:
                fresh.update(state=ended, reason=st.reason, ended_at=now())
            if ended in TERMINAL:
                job.write_record(fresh)
                job.event("state", state=ended, reason=st.lost_reason or st.reason)
    except OSError as e:  # a full disk: the reader still gets its answer, the record waits
        agent_log(root, "could not record {} as lost: {}".format(job.id, e))
