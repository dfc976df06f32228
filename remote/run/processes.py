"""The running attempt's processes: its run command, cgroup and OOM evidence; finding every process of
the job, reaping its orphans (the supervisor is their subreaper) and ending them."""

import os
import subprocess
from typing import Any, Callable, List, Optional

from remote.core import procs
from remote.core.layout import JobDir
from remote.run.record import Record
from remote.stopping import cgroup as cg
from remote.stopping import find as jobfind
from remote.stopping import kill as jobkill
from remote.stopping import late, reaper


class Processes:
    """One job's processes as its supervisor sees them (``child``: the attempt's run command)."""

    def __init__(self, job: JobDir, record: Record, path_prefix: Callable[[], str]) -> None:
        self.job, self.record, self.path_prefix = job, record, path_prefix
        self.child: Optional[subprocess.Popen] = None
        self.cgroup: Optional[str] = None  # the attempt's cgroup, where the host lets us make one
        self.oom: Any = None  # remote.host.oom.Watch of the running attempt
        self.exit_clock: Optional[late.ExitClock] = None  # when this attempt's run command ended
        self.signalled = False  # a stop signal was sent to this attempt's processes

    def started(self, child: subprocess.Popen) -> None:
        self.child = child
        self.exit_clock, self.signalled = late.ExitClock(child.pid), False  # a stop after its end changes nothing
        if self.oom is not None:
            self.oom.pids.add(child.pid)

    def ended_before_stop(self, rc: int) -> bool:
        """The run command had ended on its own (exit 0) before the stop reached it (remote/stopping/late.py)."""
        clock = self.exit_clock
        return late.ended_on_its_own(rc, clock.at if clock is not None else None, self.job, self.signalled)

    def running(self) -> bool:
        return self.child is not None and self.child.poll() is None

    def job_pids(self) -> List[int]:
        """The job's live processes (for "open for writing"); remembered for the OOM evidence."""
        pids = procs.job_pids(self.job.id, self.child.pid if self.child else None, str(self.job.path))
        if self.oom is not None:
            self.oom.pids.update(pids)
        return sorted(pids)

    def all_pids(self) -> List[int]:
        """Every process of the job, by every means (remote/stopping/find.py): what a stop must end."""
        status = self.record.status
        attempts = status.attempts or [{}]
        gpu_since = float(attempts[0].get("started_at") or 0) if status.cuda_visible_devices else 0.0
        return sorted(jobfind.find(self.job.id, str(self.job.path), self.child.pid if self.child else None,
                                   reaper=os.getpid(), cgroup=self.cgroup, path_prefix=self.path_prefix(),
                                   since=gpu_since))

    def cheap_pids(self) -> set:
        return set(procs.job_pids(self.job.id, self.child.pid if self.child else None, str(self.job.path))) \
            | cg.pids(self.cgroup)

    def end(self, grace: float, term: bool = True) -> List[int]:
        """End every process of the job (SIGTERM unless asked already, ``grace``, SIGKILL); the pids
        it had to SIGKILL. Survivors are named in status and the log (a stop then says so)."""
        killed, survivors = jobkill.end(lambda: set(self.all_pids()), grace, poll=self.tick_wait, cgroup=self.cgroup,
                                        cheap=self.cheap_pids, term=term)
        if killed:
            self.job.event("killed", pids=killed)
        if survivors:
            self.record.status.survivors = survivors
            self.record.log_marker("stop: process(es) {} still run after SIGKILL (another user's, or stuck in the "
                                   "kernel)".format(", ".join(map(str, survivors))))
        else:
            self.record.status.drop("survivors")
        return killed

    def tick_wait(self) -> None:
        """While waiting on the job: reap the run command and orphans (we are their subreaper), beat."""
        if self.child is not None:
            self.child.poll()
        self.reap_orphans()
        self.record.heartbeat()

    def reap_orphans(self) -> None:
        """Collect the job's orphans that ended (double-forked daemons reparented to us): not the run
        command (Popen waits for it) and not our own helpers (our session: subprocess waits for those)."""
        me = os.getpid()
        own = jobfind._stat(me)[3:4]
        kids = {c for c, p in procs._parents().items() if p == me and (self.child is None or c != self.child.pid)}
        reaper.reap({c for c in kids if jobfind._stat(c)[3:4] != own})
