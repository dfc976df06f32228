"""The supervisor under a Slurm allocation (issue 45): Slurm's signals turn into gpujob's stop protocol,
and a job Slurm ends to start again (a preemption, ``scontrol requeue``, the time limit) is recorded
``requeued``, never stopped, failed or lost; the next start resumes from its newest complete checkpoint.

- SIGTERM without a stop file (a requeue or preemption: Slurm signals every process of the job, then
  SIGKILLs them ``KillWait`` later): the record says ``requeued`` at once, then the attempt is stopped as
  any stop is (the stop file for code that watches it, which saves first; a checkpoint being written is
  waited for). ``gpujob stop`` writes the stop file before it ``scancel``s: that SIGTERM is a stop.
- ``--signal=B:USR1@GRACE`` (remote/slurm/batch.py) before the time limit: a stop after the next
  complete checkpoint (remote/stopping/after.py, as ``stop --after-checkpoint``), then ``scontrol requeue``.
"""

import os
import socket
from pathlib import Path
from typing import Callable, Dict, Optional

from remote.core import slurmq
from remote.core.layout import JobDir
from remote.core.protocol import TERMINAL
from remote.core.spec import JobSpec
from remote.run.record import Record
from remote.slurm import batch, step
from remote.stopping import after

ENDED = "requeued by Slurm (a preemption or scontrol requeue): resumes from the newest checkpoint"
WARNED = "Slurm's time limit is near: requeued after a checkpoint, resumes from it"
REQUEUED = "requeued"


class Allocation:
    """This supervisor's Slurm job: its id, and what Slurm asked of it so far."""

    def __init__(self, slurm_id: str) -> None:
        self.id = slurm_id
        self.warned = False  # the time-limit signal came
        self.asked = False  # ... and the stop after the next checkpoint was asked for

    @classmethod
    def of(cls, spec: JobSpec) -> "Optional[Allocation]":
        """The allocation this process runs in, for a job of a Slurm host; None anywhere else."""
        sid = slurmq.inside()
        return cls(sid) if spec.slurm.on and sid else None

    def arrived(self, job: JobDir, record: Record) -> bool:
        """Note where Slurm started the supervisor and how often; False when the job has ended (a start of
        an ended job's batch script, which Slurm requeued after all): this supervisor then leaves."""
        if record.status.state in TERMINAL:
            record.log_marker("Slurm started job {} again, but it has ended ({}): nothing to run".format(
                self.id, record.status.state))
            return False
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        nodes = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURMD_NODENAME") or ""
        record.save(slurm_job=self.id, slurm_nodes=nodes, requeues=restarts)
        if restarts:
            record.log_marker("Slurm started job {} again (requeue {}) on {}".format(self.id, restarts, nodes))
        asked = after.pending(job)
        if asked and asked.get("reason") == WARNED:  # asked in the allocation before: moot now
            after.clear(job)
        return True

    def tick(self, job: JobDir, spec: JobSpec, ckpt_dir: Path, pids: Callable[[], object],
             log_marker: Callable[[str], None]) -> None:
        """Once the time-limit signal came: a stop after the next checkpoint, at most 3/4 of the warning."""
        if not self.warned or self.asked:
            return
        self.asked = True
        try:  # the warning's seconds as the batch script asked for them (a job limit shortens it)
            warned = float(os.environ.get(batch.WARN_ENV) or batch.warn_seconds(spec))
        except ValueError:
            warned = float(batch.warn_seconds(spec))
        wait = 0.75 * warned
        after.request(job, wait, WARNED, ckpt_dir, spec.checkpoint.pattern, pids)
        log_marker("Slurm's time limit is near (job {}): stopping after the next checkpoint (at most {:g} s), "
                   "then requeued".format(self.id, wait))

    def rendezvous(self, job_id: str, attempt: int, nodes: int) -> Dict[str, object]:
        """torchrun's rendezvous over the allocation's nodes (remote/run/launch.py ``on_slurm_nodes``): the
        first node (this one: the batch script runs there) hosts it, on a port free here, per attempt."""
        first = step.first_node(os.environ.get("SLURM_JOB_NODELIST", "")) or os.environ.get("SLURMD_NODENAME", "")
        shown = slurmq.fields(slurmq.command("scontrol", "show", "node", "-o", first, check=False).stdout)
        with socket.socket() as s:  # the store listens here; the other nodes reach it at the node's address
            s.bind(("", 0))
            port = s.getsockname()[1]
        return {"slurm": True, "num_nodes": nodes, "rank": 0, "master_addr": shown.get("NodeAddr") or first,
                "port": port, "rdzv_id": "{}-{}".format(job_id, attempt)}

    @staticmethod
    def is_requeue(reason: Optional[str]) -> bool:
        """A stop for Slurm's end, not a user's (a stop after a checkpoint says which one it waited for after it)."""
        return bool(reason) and str(reason).startswith((ENDED, WARNED))

    def requeue(self, job: JobDir, record: Record, reason: str) -> str:
        """The attempt ended for Slurm: the stop protocol's files go (the next start must not stop at
        once), the record says ``requeued``; at the time limit Slurm is asked to requeue the job."""
        for p in (job.stop_file, job.stop_watch, job.stop_acted, job.stop_ended):
            try:
                os.unlink(str(p))
            except OSError:
                pass
        after.clear(job)
        record.set_state(REQUEUED, reason=reason, child_pid=None, stopping=None)
        job.event("requeued", reason=reason, slurm_job=self.id)
        if reason.startswith(WARNED):
            done = slurmq.command("scontrol", "requeue", self.id, check=False)
            if done.returncode != 0:
                record.log_marker("scontrol requeue {} failed: {}; resume it with gpujob resume {}".format(
                    self.id, (done.stderr or done.stdout).strip()[:300], job.id))
        record.log_marker("the job was {}".format(reason))
        return REQUEUED
