"""The verbs of a job's life: ``status`` (one job, or the listing), ``submit``, ``stop``, ``resume``,
``run`` (its supervisor), a move's two ends (``adopt``, ``moved``), ``pulled`` and ``notify_lost``."""

import argparse
import json
import sys
import time
from typing import Dict, Mapping, Optional

from remote.core import locks
from remote.core.errors import AgentError
from remote.core.layout import Root
from remote.core.protocol import SETTLED, TERMINAL
from remote.jobs.store import resolve
from remote.view import status as view

STOP_TURN = 30.0  # s a stop waits for a resume under way (then it stops the run that resume started)


def status(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    if a.job:
        job_id = resolve(root, a.job)
        return {"jobs": [view.describe(root, job_id, detail=True)], "now": time.time()}
    from remote.jobs import index as jobindex

    ids, older, done = jobindex.listing(root, everything=a.all or bool(a.limit))
    if a.limit:
        ids = ids[-a.limit:]
    described = [_listed(root, i) for i in ids]
    for i, d in zip(ids, described):
        d.setdefault("job_id", i)  # a damaged status.json still names its job
    finished = [i for i, d in zip(ids, described)  # lost ones stay: resumable, and still to be announced
                if d.get("state") in SETTLED and i not in done]
    for i in finished:  # the next listing skips them without reading their folders
        try:
            with locks.job_lock(root.job(i).path):  # judged again: a resume in between keeps it listed
                if root.job(i).record().state in SETTLED:
                    jobindex.mark(root, [i], True)
        except OSError:  # a full or read-only disk: the listing still answers
            pass
    return {"jobs": described, "now": time.time(), "older": older, "instance": root.instance_id()}


def _listed(root: Root, job_id: str) -> Dict[str, object]:
    """A job's line in a listing; a damaged record costs its own line only."""
    try:
        return view.describe(root, job_id)
    except AgentError as e:
        st = root.job(job_id).record()
        return {"job_id": job_id, "name": st.name, "state": st.state or "unknown",
                "error": e.message, "remedy": e.remedy, "last_line": e.message[:200]}


def submit(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    from remote.jobs import submit as jobsubmit

    raw = sys.stdin.read()
    if not raw.strip():  # started while its sync ran (gpujob/usecases/launch/early.py), which then failed
        return {"cancelled": True}
    request = json.loads(raw)
    with locks.lease_back_on_failure(root.root, request):
        res = jobsubmit.submit(root, request)
    if res.get("slurm_job"):  # Slurm's word at once: pending (and why), or starting on a node
        from remote.core import procs
        from remote.jobs import store as jobstore

        rec = jobstore.live_status(root, root.job(res["job_id"]), procs.boot_id())
        return dict(res, state=rec.state, slurm=rec.doc.get("slurm"))
    st = jobsubmit.wait_started(root.job(res["job_id"]), 3.0)
    if st:
        res["state"] = st.state
    return res


def stopped(root: Root, job_id: str, wait: float, reason: str = "stopped by user",
            after_checkpoint: Optional[float] = None, job_mode: bool = False) -> Mapping[str, object]:
    """Stop the job (remote/stopping/verb.py), then its status as ``status`` shows it, with
    ``survivors`` (the pids still running) while it has not ended."""
    from remote.stopping import verb

    # held until the answer is read: a resume asked meanwhile waits for it (remote/core/locks.py stop_turn)
    with locks.stop_turn(root.job(job_id).path, shared=True, wait=STOP_TURN):
        verb.stop(root, job_id, wait, reason, after_checkpoint, job_mode)
        out = view.describe(root, job_id)
        if out.get("state") not in TERMINAL:
            out["survivors"] = verb.survivors(root.job(job_id))
    return out


def stop(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    after = None if a.after_checkpoint is None else -1.0 if a.after_checkpoint == "auto" else float(a.after_checkpoint)
    return stopped(root, resolve(root, a.job), a.wait, a.reason[:300], after_checkpoint=after, job_mode=a.job_mode)


def resume(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    from remote.jobs import resume as jobresume

    return jobresume.resume(root, resolve(root, a.job))


def run(root: Root, a: argparse.Namespace) -> int:
    from remote.run import supervisor

    return supervisor.main(root, a.job_id)


def adopt(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    """A job moving here: request line in, wish list out, its files in, the job started."""
    from remote.jobs import move

    return move.adopt(root, sys.stdin.buffer, sys.stdout.buffer)


def moved(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    from remote.jobs import move

    return move.mark_moved(root, a.job, a.to)


def pulled(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    from remote.run import power

    return power.mark_pulled(root.job(resolve(root, a.job)))


def notify_lost(root: Root, a: argparse.Namespace) -> Mapping[str, object]:
    from remote.run import events

    return events.notify_lost(root, a.job_id)
