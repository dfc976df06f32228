"""Stopping a running attempt: whether a stop is asked for (the stop file, a SIGTERM to the supervisor, a
stop after the next checkpoint), and the stop itself: the stop file, the grace to save, the signals."""

import os
import signal
import time
from pathlib import Path
from typing import Callable, Dict, Optional

from remote.core import procs
from remote.core.layout import JobDir, with_reserve
from remote.core.spec import JobSpec
from remote.run.processes import Processes
from remote.run.record import Record
from remote.stopping import after

TICK = 0.25  # seconds between two looks while waiting on the job


class Stopper:
    """The attempt's stop: ``reason`` once one was asked for (it decides the job's final state)."""

    def __init__(self, job: JobDir, record: Record, processes: Processes, spec: Callable[[], JobSpec],
                 ckpt_dir: Callable[[], Path]) -> None:
        self.job, self.record, self.procs, self.spec, self.ckpt_dir = job, record, processes, spec, ckpt_dir
        self.reason: Optional[str] = None
        self.terminated = False  # the supervisor got SIGTERM/SIGINT
        self.ended_by: Optional[str] = None  # the scheduler ends the allocation (remote/run/slurmjob.py): why

    def requested(self) -> Optional[str]:
        if self.terminated:
            return "agent terminated"
        try:
            text = self.job.stop_file.read_text().strip()
        except OSError:
            if self.ended_by:  # no stop file: the scheduler's own end (a requeue), not a user's stop
                return self.ended_by
            # a stop after the next checkpoint, with no attempt running to write one: now
            req = after.pending(self.job) if not self.procs.running() else None
            return str(req.get("reason") or "stop requested") if req else None
        return text or "stop requested"

    def stop(self, reason: str, saved: bool = False) -> None:
        """Stop the attempt: the stop file; then, for code that watches it, the grace to save
        before SIGTERM/SIGKILL; for code that does not, a stop signal to each process chosen
        for where it listens (procs.stop_signal), the grace, then SIGKILL of what is left.
        ``saved``: the checkpoint the stop waited for is complete, nothing is left to save: the
        grace is a few seconds (after.LANDED_GRACE)."""
        self.reason = reason
        self.record.save(stopping=reason)
        if not self.job.stop_file.exists():
            with_reserve(lambda: self.job.stop_file.write_text(reason + "\n"))
        grace = self.spec().stop.grace
        if saved:
            grace = min(grace, after.LANDED_GRACE)
        child = self.procs.child
        assert child is not None
        watching = self.job.stop_watch.exists()
        if watching:  # the runtime helper (or the Trainer hook) polls the stop file: give it the grace to save
            procs.wait_gone(lambda: child.poll() is None, grace, self.procs.tick_wait, TICK)
            grace, term = (grace if saved else 10.0), True
        else:
            grace, term = self.ask_to_stop(self.wait_for_saves(grace)), False
        rc = child.poll()
        if rc is not None:  # the log says which happened: it left on its own, or gpujob ended it
            self.record.log_marker("stop: the run command exited with code {} after the stop request{}".format(
                rc, " (it caught the stop and finished on its own: the job is stopped, not succeeded)" if rc == 0 else ""))
        killed = self.procs.end(grace, term=term)
        if killed:
            self.record.status.killed = killed
        if rc is None:
            child.wait()
            self.record.log_marker("stop: {} (exit status {})".format(
                "still running after the grace: SIGKILL of pid(s) " + ", ".join(map(str, killed)) if killed
                else "ended by the stop signal", child.returncode))

    def wait_for_saves(self, grace: float) -> float:
        """A script that never looks at the stop file gets a signal, and one in the middle of ``torch.save``
        (a GPT trainer overwriting its one ckpt.pt) leaves it cut short: all its work lost. While a process
        of the job writes a checkpoint file, wait (up to 3/4 of the grace); returns the grace left."""
        from remote.run.ckptdir import checkpoints

        child = self.procs.child
        assert child is not None
        start, said = time.monotonic(), False
        while time.monotonic() - start < 0.75 * grace and child.poll() is None:
            try:
                busy = checkpoints().being_saved(self.ckpt_dir(), self.procs.job_pids)
            except (ImportError, OSError):
                break
            if not busy:
                break
            if not said:
                said = True
                self.record.log_marker("stop: waiting for {} to be written first (a signal now would cut it short)"
                                       .format(os.path.basename(busy[0])))
            self.procs.tick_wait()
            time.sleep(TICK)
        return max(0.0, grace - (time.monotonic() - start))

    def ask_to_stop(self, grace: float) -> float:
        """Signal the job's processes (SIGINT or SIGTERM each) and wait up to ``grace`` for them;
        returns how long the rest may take before SIGKILL (0 when the grace ran out)."""
        child = self.procs.child
        assert child is not None
        asked = procs.ask_to_stop(self.job.id, child.pid, job_dir=str(self.job.path), pids=set(self.procs.all_pids()))
        self.procs.signalled = self.procs.signalled or bool(asked)
        names: Dict[int, str] = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}
        shown = round(grace, 1) if grace < 10 else round(grace)  # what is left of it: 59.996 s reads 60 s
        self.record.log_marker("stop: {} (grace {:g}s, then SIGKILL)".format(
            ", ".join("pid {} {}".format(p, names.get(s, s)) for p, s in sorted(asked.items())) or "no process to ask",
            shown))
        self.job.event("stop_signals", signals={str(p): names.get(s, s) for p, s in asked.items()})
        # tick_wait reaps the run command's shell
        gone = procs.wait_gone(lambda: any(procs.pid_alive(p) for p in asked), grace, self.procs.tick_wait, TICK)
        return 5.0 if gone else 0.0
