"""Whether a job lives: the one rule, judged on its record (remote/core/jobrecord.py).

Every place that asks (status and ls, stop, resume, move, rm and gc, power-off, the GPU queue,
the lost notice) calls :func:`liveness` and reads its :class:`Verdict`; nothing else judges it.
"""

import os
from typing import TYPE_CHECKING, Dict, List, Optional

from remote.core import locks, procs
from remote.core.jobrecord import JobRecord
from remote.core.layout import JobDir, now
from remote.core.protocol import LOST, PENDING, TERMINAL

if TYPE_CHECKING:  # the Slurm client (subprocess, shutil) loads only when a Slurm job is judged
    from remote.core.slurmq import SlurmJob


def stale_after() -> float:
    """Seconds without a heartbeat after which a record is stale (read at each look: ``agent.env`` may set it)."""
    return float(os.environ.get("GPUJOB_STALE_AFTER", "30"))


def heartbeat_age(rec: JobRecord) -> float:
    """Seconds since the supervisor last wrote the record (since the submit, before its first beat)."""
    return now() - float(rec.heartbeat or rec.submitted_at or 0)


class Verdict:
    """What a job's record means now. Each fact is looked up once, and only when a question needs
    it (a look at ``/proc`` or the supervisor's lock costs: ``ls`` asks for every job)."""

    def __init__(self, job: JobDir, record: JobRecord, boot: str) -> None:
        self.job, self.record = job, record
        self.sup = record.supervisor_pid
        self.recorded = record.state  # the state the record claims
        self.rebooted = bool(record.boot_id) and record.boot_id != boot
        self._runs = None  # type: Optional[bool]
        self._locked = None  # type: Optional[bool]
        self._left = None  # type: Optional[List[int]]
        self._lost = None  # type: Optional[bool]
        self.stale = self.recorded not in TERMINAL and heartbeat_age(record) > stale_after()

    @property
    def lost(self) -> bool:
        """The record claims the job runs or waits, but nothing does: the instance rebooted, or the
        supervisor is gone. A named supervisor (submit and resume name the one they start) that is
        gone and holds no lock is proof (a kill -9): no need to wait for the heartbeat to age."""
        if self._lost is None:
            self._lost = self.recorded not in TERMINAL and (
                self.rebooted or ((self.stale or bool(self.sup)) and not self.runs and not self.locked))
        return self._lost

    @property
    def runs(self) -> bool:
        """The named supervisor runs, and is this job's (a pid given to another process since is not)."""
        if self._runs is None:
            self._runs = procs.belongs_to(self.sup, self.job.id)
        return self._runs

    @property
    def locked(self) -> bool:
        """A supervisor holds the job's lock now (one starting, or one ending: a final upload)."""
        if self._locked is None:
            self._locked = locks.supervisor_alive(self.job.path)
        return self._locked

    @property
    def state(self) -> Optional[str]:
        """The state a reader sees: ``lost`` when the supervisor is gone, else the record's."""
        return LOST if self.lost else self.recorded

    @property
    def lives(self) -> bool:
        """A supervisor runs the job or will (queued, running, restarting, stopping)."""
        return self.state not in TERMINAL

    @property
    def starting(self) -> bool:
        """No named supervisor runs, but one is on its way (it holds the lock, or a queued job's is
        not named yet): a stop waits for it rather than acting itself."""
        return not self.runs and (self.locked or (self.recorded == "queued" and not self.sup))

    @property
    def silent(self) -> bool:
        """The supervisor lives but writes no heartbeat (frozen, a full disk): a reader is told."""
        return not self.lost and self.recorded not in TERMINAL and bool(self.sup) and self.stale and self.runs

    @property
    def holds_gpus(self) -> bool:
        """The job may hold GPUs in the queue's eyes: not ended, and its named supervisor runs."""
        return self.recorded not in TERMINAL and self.runs

    def left(self) -> List[int]:
        """The processes of a lost job that still run (its supervisor died, its trainer goes on);
        none after a reboot."""
        if self._left is None:
            alive = self.state == LOST and not self.rebooted
            self._left = sorted(procs.job_pids(self.job.id, job_dir=str(self.job.path))) if alive else []
        return self._left

    @property
    def working(self) -> bool:
        """Whether removing the job's folder (or powering the host off) would cut work: it runs or
        waits, or it is lost and its processes still run (they write into the folder; a stop finds
        them by it)."""
        return self.lives or bool(self.left())

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the job is lost: the record's words, or this look's when it concludes it now."""
        if not self.lost:
            return self.record.lost_reason
        if self.rebooted:
            return "the instance rebooted"
        why = "the agent is gone (stale heartbeat)"
        if self.left():
            why += "; {} process(es) of the job still run: stop ends them, resume restarts " \
                   "from the newest checkpoint".format(len(self.left()))
        return why


class SlurmVerdict(Verdict):
    """A job Slurm runs (its record names a Slurm job): Slurm says whether it waits, runs or is gone,
    the heartbeat whether its supervisor still writes. This machine (a login node) never judges it by
    its own boot id, process table or locks: the supervisor runs on a compute node."""

    def __init__(self, job: JobDir, record: JobRecord, boot: str) -> None:
        super().__init__(job, record, boot)
        self.rebooted = False
        self.slurm_id = record.slurm_job or ""
        self._asked = False
        self._slurm = None  # type: Optional[SlurmJob]
        self._error = None  # type: Optional[str]
        self._locked, self._left = False, []

    def _ask(self) -> None:
        """Slurm's word, asked once and only when a question needs it (an ended record's does not)."""
        if not self._asked:
            self._asked = True
            from remote.core import slurmq

            try:
                self._slurm = slurmq.job(self.slurm_id)
            except slurmq.SlurmError as e:  # the controller is away: the record's word stands, said as such
                self._error = e.message

    @property
    def slurm(self) -> "Optional[SlurmJob]":
        self._ask()
        return self._slurm

    @property
    def slurm_error(self) -> Optional[str]:
        self._ask()
        return self._error

    @property
    def runs(self) -> bool:
        return self.slurm is not None and self.slurm.running

    @property
    def lost(self) -> bool:
        return self.state == LOST

    @property
    def state(self) -> Optional[str]:
        if self.recorded in TERMINAL or self.slurm_error:
            return self.recorded
        if self.slurm is not None and self.slurm.waiting:
            return PENDING
        if self.slurm is not None and self.slurm.running:
            return self.recorded
        from remote.core.slurmq import ENDED_AS

        ended = ENDED_AS.get(self.slurm.state) if self.slurm is not None else None
        return ended[0] if ended else LOST

    @property
    def starting(self) -> bool:
        return self.slurm is not None and (self.slurm.waiting or (self.slurm.running and self.recorded == "queued"))

    @property
    def silent(self) -> bool:
        return self.slurm is not None and self.slurm.running and self.stale

    @property
    def holds_gpus(self) -> bool:  # Slurm places the work: this host's GPU queue steps aside
        return False

    @property
    def lost_reason(self) -> Optional[str]:
        if self.recorded in TERMINAL or self.slurm_error or (self.slurm is not None and self.slurm.alive):
            return self.record.lost_reason
        if self.slurm is None:
            return "Slurm no longer knows job {} and its agent wrote no end".format(self.slurm_id)
        from remote.core.slurmq import ENDED_AS

        ended = ENDED_AS.get(self.slurm.state)
        return ended[1] if ended else "Slurm job {} ended ({}) before its agent wrote the end".format(
            self.slurm_id, self.slurm.state)


    def said(self) -> Dict[str, object]:
        """What Slurm says now, for a reader (the status document's ``slurm``)."""
        if self.slurm_error:
            return {"job": self.slurm_id, "error": self.slurm_error}
        if self.slurm is None:
            from remote.core.slurmq import UNKNOWN

            return {"job": self.slurm_id, "state": UNKNOWN}
        return self.slurm.to_json()


def liveness(job: JobDir, record: JobRecord, boot: str) -> Verdict:
    """Whether ``job`` lives, judged on its ``record`` in this boot (``procs.boot_id()``).

    On an instance the answer comes from this host: the boot the record was written in, the
    supervisor's pid in the process table (as this job's), its lock, and the heartbeat's age. A job
    Slurm runs (issue 45) is judged by asking Slurm (:class:`SlurmVerdict`); every caller reads the
    same :class:`Verdict` either way."""
    if record.slurm_job:
        return SlurmVerdict(job, record, boot)
    return Verdict(job, record, boot)
