"""``stop`` of a job on a Slurm host: the supervisor on the compute node stops it as on an instance (the
stop file, the grace to save), then ``scancel`` leaves nothing of it in Slurm's queue or on any node. A job
still waiting in the queue is cancelled at once. The login node never signals a process itself: the job's
processes are on a compute node, and Slurm ends them."""

import time
from typing import Callable, Mapping, Optional

from remote.core import slurmq
from remote.core.layout import JobDir, now, with_reserve
from remote.core.liveness import SlurmVerdict
from remote.core.protocol import TERMINAL
from remote.stopping import after

ACT_MARGIN = 30.0  # s past the job's stop grace a supervisor gets to write its end before scancel
CANCEL_WAIT = 60.0  # s for Slurm to end what is left once scancel'd (its KillWait, 30 s by default, and more)


def stop(job: JobDir, verdict: SlurmVerdict, wait: float, reason: str, after_checkpoint: Optional[float],
         write: Callable[[JobDir, Mapping[str, object], Optional[Mapping[str, object]]], bool]) -> None:
    """Stop ``job`` (its record judged as ``verdict``), waiting up to ``wait`` s for its supervisor."""
    if after_checkpoint is None:  # its supervisor needs the grace; past it (a frozen one), scancel ends it
        wait = min(wait, job.job_spec().stop.grace + ACT_MARGIN)
    deadline = time.monotonic() + wait
    st = verdict.record
    running = verdict.slurm is not None and verdict.slurm.running and st.state not in TERMINAL
    if running and after_checkpoint is not None and st.state == "running":
        after.request(job, after_checkpoint if after_checkpoint >= 0 else None, reason, pids=lambda: set())
    elif st.state not in TERMINAL or (verdict.slurm is not None and verdict.slurm.alive):
        # first: the supervisor, if Slurm starts it meanwhile, reads a stop rather than a requeue
        with_reserve(lambda: job.stop_file.write_text(reason + "\n"))
        job.event("stop_requested", reason=reason)
    if running:  # its supervisor stops it, with the job's grace to save
        while time.monotonic() < deadline and job.record().state not in TERMINAL:
            if not _still_runs(verdict.slurm_id):
                break
            time.sleep(0.5)
    gone = True
    if verdict.slurm_id:
        gone = slurmq.cancel(verdict.slurm_id, min(CANCEL_WAIT, max(deadline - time.monotonic(), 10.0)))
        job.event("slurm_cancelled", slurm_job=verdict.slurm_id, gone=gone)
    fresh = job.record()
    if not gone and fresh.state not in TERMINAL:  # Slurm still ends it: not said stopped (the answer says so)
        write(job, {"stopping": fresh.stopping or reason}, None)
    elif fresh.state not in TERMINAL:  # cancelled while it waited, or its supervisor could not write the end
        write(job, {"state": "stopped", "reason": fresh.stopping or reason, "ended_at": now(), "child_pid": None},
              {"state": "stopped", "reason": reason})


def _still_runs(slurm_id: str) -> bool:
    try:
        got = slurmq.job(slurm_id, fresh=True)
    except slurmq.SlurmError:
        return True  # the controller away: the record's end is what is waited for
    return got is not None and got.running
