"""The supervisor (``python3 -m remote run JOB``): runs a job's attempts until it ends.

Started detached (its own session) by ``submit``, so it outlives the SSH connection.
It owns ``status.json`` (written atomically, with a heartbeat), ``events.jsonl`` and the
attempt markers in ``output.log`` (remote/run/record.py); beside each attempt its watchers
(remote/run/watchers.py) run in this order: the stop after the next checkpoint, GPU sampling,
checkpoint rotation, the kept copy, metrics, the checkpoint mirror, auto-stop.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, List, Optional

from remote.core import layout, locks, procs
from remote.core.layout import JobDir, Root, agent_log, now
from remote.env.jobenv import PATH_PREFIX
from remote.run import childenv, ckptdir, events, launch, retry, slurmjob
from remote.run.autostop import BUDGET_STOP
from remote.run.gpuqueue import take_gpus
from remote.run.keptcopy import KeptCopy
from remote.run.processes import Processes
from remote.run.record import Record
from remote.run.rotation import Rotator
from remote.run.slurmjob import Allocation
from remote.run.stopper import TICK, Stopper
from remote.run.watchers import GpuWatch, JobContext, MetricsWatch, Watchers
from remote.stopping import after, reaper
from remote.stopping import cgroup as cg


class Supervisor:
    """One job's life: attempts, restarts, stop requests, the final state."""

    def __init__(self, root: Root, job: JobDir) -> None:
        self.root, self.job = root, job
        self.spec = job.job_spec()  # with the environment ``provision`` set up, once it ran
        self.record = Record(root, job)
        self.status = self.record.status
        self.procs = Processes(job, self.record, lambda: self.spec.path_prefix)
        self.stopper = Stopper(job, self.record, self.procs, lambda: self.spec, self.ckpt_dir)
        self.ctx = JobContext(root, job, lambda: self.spec, lambda: self.status, self.ckpt_dir, self.procs.job_pids,
                              self.record.log_marker, self.record.heartbeat)
        self.watchers = Watchers(root, job.id)
        self.slurm = Allocation.of(self.spec)  # under a Slurm allocation: its signals and requeue
        self.add_own_watchers()
        events.attach(self.ctx, self.watchers)  # notifications and auto-stop policies

    def add_own_watchers(self) -> None:
        """GPU sampling into gpu.jsonl and checkpoint rotation run beside every attempt."""
        ctx, pattern = self.ctx, self.spec.checkpoint.pattern
        # the host profile's env (spec host_env), then <root>/agent.env / the agent's environment
        interval = float(self.spec.host_env.get("GPUJOB_GPU_SAMPLE") or os.environ.get("GPUJOB_GPU_SAMPLE", "5"))
        # first: once its checkpoint landed, a stop asked for "after the next checkpoint" goes before any other
        self.watchers.add(after.Watch(self.job, self.ckpt_dir(), pattern, ctx), first=True)
        self.watchers.add(GpuWatch(ctx, interval, self.record.save, lambda kind, **kw: events.emit(ctx, kind, **kw)))
        self.rotator = Rotator(ctx, self.ckpt_dir(), self.spec.checkpoint.keep, pattern,
                               sending=lambda: ctx.mirror.sending() if ctx.mirror is not None else [])
        self.watchers.add(self.rotator)
        self.kept = None  # checkpoint.backup: a copy of each checkpoint file the script rewrites in place
        if self.spec.checkpoint.backup:
            self.kept = KeptCopy(ctx, self.ckpt_dir(), pattern)
            self.watchers.add(self.kept)
        self.metrics = MetricsWatch(ctx, float(self.status.submitted_at or now()))
        self.watchers.add(self.metrics)
        if self.spec.checkpoint.mirror.targets:  # uploads each complete checkpoint (remote/mirror)
            from remote.run.mirror import Mirror

            ctx.mirror = Mirror(ctx, self.spec.checkpoint.mirror)
            self.watchers.add(ctx.mirror)

    def ckpt_dir(self) -> Path:
        return ckptdir.ckpt_dir(self.job, self.spec)

    def stop_requested(self) -> Optional[str]:
        return self.stopper.requested()

    def end_processes(self, grace: float, term: bool = True) -> List[int]:
        return self.procs.end(grace, term)

    def heartbeat(self) -> None:
        self.record.heartbeat()

    # ---- one attempt --------------------------------------------------------------------
    def start_attempt(self, attempt: int) -> None:
        ckptdir.link_in_code(self.job, self.spec)
        if self.kept is not None:
            self.kept.restore(attempt)
        pattern = self.spec.checkpoint.pattern
        resume = ckptdir.latest_resume(self.ckpt_dir(), pattern, self.procs.job_pids)
        self.record.new_attempt()
        for mark in (self.job.stop_watch, self.job.stop_acted, self.job.stop_ended):  # each attempt acknowledges the stop file afresh (a Trainer hook: at its first step)
            try:
                os.unlink(str(mark))
            except OSError:
                pass
        how = " (resume from {})".format(resume) if resume else ckptdir.why_from_start(self.ckpt_dir(), pattern)
        self.record.log_marker("attempt {} started{}".format(attempt, how))
        self.procs.cgroup, why = cg.create(str(self.job.path))
        if why and not self.status.cgroup_note:
            self.status.cgroup_note = "no per-job cgroup ({}): a stop finds the job's processes by tree, " \
                "session, environment, open files and GPU use".format(why)
        if self.slurm is not None and self.spec.slurm.nodes > 1 and self.spec.launcher == "torchrun":
            self.spec = self.spec.with_values(node=self.slurm.rendezvous(self.job.id, attempt, self.spec.slurm.nodes))
        log = open(str(self.job.log), "ab")
        try:
            command = launch.command(childenv.launch_spec(self.spec, self.status), attempt)
            env = childenv.environment(self.root, self.job, self.spec, self.status, self.ckpt_dir(), attempt, resume)
            child = subprocess.Popen(
                ["bash", "-lc", cg.enter_line(self.procs.cgroup) + PATH_PREFIX + command], cwd=str(self.job.code), env=env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        finally:
            log.close()
        self.procs.started(child)
        self.status.add_attempt({"n": attempt, "started_at": now(), "resume": resume, "pid": child.pid,
                                 "batch_divisor": self.status.batch_divisor})
        self.record.set_state("running", attempt=attempt, child_pid=child.pid,
                              started_at=self.status.started_at or now(), cgroup=self.procs.cgroup)
        events.started(self.ctx)

    def wait_attempt(self) -> int:
        child = self.procs.child
        assert child is not None
        while True:
            rc = child.poll()
            if rc is not None:
                # the main process ended: no straggler of this attempt may survive it
                self.procs.end(5.0)
                cg.remove(self.procs.cgroup)
                # code that watches the stop file may save and exit before this loop sees the
                # request: the attempt still ended because of it (stopped, not succeeded or retried)
                self.stopper.reason = self.stopper.reason or self.stop_requested()
                return rc
            if self.slurm is not None:  # the time limit's signal: a stop after the next checkpoint
                self.slurm.tick(self.job, self.spec, self.ckpt_dir(), self.procs.job_pids, self.record.log_marker)
            reason, by = self.stop_requested(), None
            if not reason:
                reason, by = self.watchers.tick(time.monotonic())
            if reason and self.slurm is not None and self.slurm.is_requeue(reason):  # said before Slurm's SIGKILL
                self.record.set_state("requeued", reason=reason)
            if reason and reason.startswith("autostop") and not isinstance(by, after.Watch) \
                    and (self.spec.stop.mode == "checkpoint" or reason.startswith(BUDGET_STOP)
                         and after.saves(self.ckpt_dir(), self.spec.checkpoint.pattern, self.procs.job_pids)):
                if not after.pending(self.job):  # stop: {mode: checkpoint}: the next checkpoint first
                    req = after.request(self.job, self.spec.stop.max_wait, reason, self.ckpt_dir(),
                                        self.spec.checkpoint.pattern, self.procs.job_pids)
                    self.record.log_marker("{}: stopping after the next checkpoint (at most {:g} s)".format(
                        reason, req["max_wait"]))
                reason = None
            if reason:
                self.stopper.stop(reason, saved=isinstance(by, after.Watch) and by.landed)
                cg.remove(self.procs.cgroup)
                return child.returncode
            self.procs.reap_orphans()
            self.record.heartbeat()
            time.sleep(TICK)

    def note_stray_checkpoints(self) -> None:
        """Checkpoints written where gpujob does not look (no checkpoint.dir): the log says how
        to fix the job file once, since the next attempt gets no GPUJOB_RESUME from them."""
        if self.status.stray_noted or ckptdir.latest_resume(self.ckpt_dir(), self.spec.checkpoint.pattern):
            return
        from remote.jobs.saved import stray_checkpoints

        try:
            stray = stray_checkpoints(self.job, self.spec, self.status)
        except Exception as e:  # a hint must never take the job down
            agent_log(self.root, "{}: looking for checkpoints in the code failed: {}".format(self.job.id, e))
            return
        if stray:
            self.status.stray_noted = True
            self.record.log_marker(stray["advice"])

    # ---- the job ------------------------------------------------------------------------
    def prepare(self) -> Optional[str]:
        """The job's environment (``setup:``, ``requirements:``, ``python:``, once per content hash), recorded
        for tunnel, doctor and exec; the final state if it could not be made."""
        from remote.env import provision

        def tick() -> Optional[str]:  # while the environment is made: a heartbeat; the stop asked for, if one is
            self.heartbeat()
            return self.stop_requested()

        try:
            self.spec = self.spec.with_values(host_env=dict(self.spec.host_env, **provision.ensure(
                self.root, self.job, self.spec, tick=tick)))
            if self.ctx.notifier is not None:  # its messages read the environment as the job has it
                self.ctx.notifier.spec = self.spec
        except provision.SetupFailed as e:
            stop = self.stop_requested()
            return self.finish("stopped" if stop else "failed", reason=stop or "setup failed", exit_code=e.rc)
        try:  # tunnel, doctor and exec run what the job runs
            from remote.env import jobenv

            jobenv.record(self.job, self.spec)
        except OSError as e:
            agent_log(self.root, "env.json of {} not written: {}".format(self.job.id, e))
        return None

    def run(self) -> str:
        if self.slurm is not None and not self.slurm.arrived(self.job, self.record):
            return str(self.status.state)
        self.record.save(supervisor_pid=os.getpid(), boot_id=procs.boot_id(), agent=str(layout.AGENT_DIR.name))
        attempt = int(self.status.attempt or 0)
        # Slurm placed the job and gave it its GPUs (CUDA_VISIBLE_DEVICES): the host's GPU queue steps aside
        cannot = None if self.spec.slurm.on else \
            take_gpus(self.root, self.job, self.spec, self.record, self.stop_requested)
        if cannot:
            if self.stop_requested():
                return self.finish("stopped", reason=cannot, exit_code=None)
            return self.finish("failed", reason=cannot, exit_code=None,
                               remedy="submit to a host with enough GPUs (gpujob doctor HOST lists them), or lower gpus:")
        ended = self.prepare()
        if ended:
            return ended
        while True:
            if self.stop_requested():
                return self.finish("stopped", reason=self.stop_requested(), exit_code=None)
            attempt += 1
            from remote.host import oom

            self.procs.oom = oom.Watch()
            try:
                self.start_attempt(attempt)
            except OSError as e:
                self.record.log_marker("could not start the run command: {}".format(e))
                return self.finish("failed", reason="could not start: {}".format(e), exit_code=None)
            rc = self.wait_attempt()
            ended = self.after_attempt(attempt, rc)
            if ended:
                return ended

    def after_attempt(self, attempt: int, rc: int) -> Optional[str]:
        """The attempt ended with ``rc``: the job's final state, or None once the next attempt may start."""
        record = self.status.attempts[-1]
        record.update({"ended_at": now(), "exit_code": rc})
        self.record.log_marker("attempt {} ended with exit code {}".format(attempt, rc))
        self.note_stray_checkpoints()
        self.rotator.rotate()
        self.metrics.final()  # the attempt's last lines and events, before any notification
        stop_reason = self.stopper.reason
        if self.slurm is not None and self.slurm.is_requeue(stop_reason):
            record["reason"] = str(stop_reason)
            return self.slurm.requeue(self.job, self.record, str(stop_reason))
        if stop_reason and self.procs.ended_before_stop(rc):
            record["stop_came_late"] = stop_reason  # e.g. a sweep's budget stop after its last step
            self.record.log_marker("the run command had ended on its own (exit 0) when the stop ({}) reached it: "
                                   "the job succeeded".format(stop_reason))
            return self.finish("succeeded", exit_code=0, stopping=None, stop_came_late=stop_reason)
        if stop_reason:
            record["reason"] = stop_reason
            state = "autostopped" if stop_reason.startswith("autostop") else "stopped"
            return self.finish(state, reason=stop_reason, exit_code=rc)
        if rc == 0:
            return self.finish("succeeded", exit_code=0)
        diag = retry.classify(self.job, rc, self.procs.oom)
        cause = diag["cause"]
        record.update({"reason": cause, "summary": diag.get("summary")})
        self.status.diagnosis = diag  # status shows what the log says, not a second opinion
        if not retry.should_retry(self.spec, attempt, cause):
            self.record.log_marker("attempt {} failed: {}; no restart".format(attempt, diag.get("summary")))
            return self.finish("failed", reason=cause, exit_code=rc)
        if retry.halves_batch(self.spec, diag):
            self.status.batch_divisor *= 2
            self.record.log_marker("CUDA out of memory: restarting with GPUJOB_BATCH_DIVISOR={}".format(
                self.status.batch_divisor))
        else:
            self.record.log_marker("attempt {} failed: {}; restarting".format(attempt, diag.get("summary")))
        wait = retry.wait_before(self.spec, attempt, self.status)
        self.record.set_state("restarting", reason=cause, exit_code=rc, next_attempt_at=now() + wait)
        self.job.event("restart", attempt=attempt + 1, cause=cause, exit_code=rc)
        events.emit(self.ctx, "restarted", reason=diag.get("summary") or cause, diagnosis=diag.get("summary"))
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not self.stop_requested():
            self.heartbeat()
            time.sleep(TICK)
        gone = retry.gpus_gone(self.spec)
        if gone and not self.stop_requested():  # a restart there would fail again, or train on the CPU for hours
            self.record.log_marker("no restart: {}".format(gone))
            return self.finish("failed", reason=gone, exit_code=rc,
                               remedy="gpujob resume {0} once the instance has its GPUs again (from the newest "
                                      "complete checkpoint), or gpujob move {0} --to HOST".format(self.job.id))
        return None

    def finish(self, state: str, **changes: Any) -> str:
        if self.slurm is not None and state == "stopped" and self.slurm.is_requeue(changes.get("reason")):
            return self.slurm.requeue(self.job, self.record, str(changes["reason"]))  # before its first attempt
        after.clear(self.job)  # a stop after a checkpoint still waited for is moot now
        if self.kept is not None:  # a copy under way lands rather than leaving its temporary file behind
            self.kept.wait(30.0)
        self.record.set_state(state, ended_at=now(), child_pid=None, gpus_held=False, waiting_for_gpus=False, **changes)
        self.job.event("finished", state=state)
        events.on_finish(self.ctx, state)  # last notification delivered, then power-off if asked
        return state


def main(root: Root, job_id: str) -> int:
    job = root.job(job_id)
    try:
        held = locks.hold_supervisor(job.path)  # kept open for this process's life
    except OSError as e:  # the job's folder was removed (gpujob rm) before this started
        agent_log(root, "{}: cannot hold its supervisor lock ({}); this one leaves".format(job_id, e))
        return 1
    if held is None:
        agent_log(root, "{}: another supervisor runs it; this one leaves".format(job_id))
        return 0
    reaper.become()  # a double-forked daemon of the job stays our child, so a stop finds it
    sup = Supervisor(root, job)

    def on_term(signum: int, frame: Any) -> None:
        sup.stopper.terminated = True

    signal.signal(signal.SIGTERM, on_term)
    if sup.slurm is not None:
        allocation = sup.slurm

        def on_slurm_end(signum: int, frame: Any) -> None:  # gpujob stop's scancel comes after its stop file
            sup.stopper.ended_by = slurmjob.ENDED

        def on_time_limit(signum: int, frame: Any) -> None:
            allocation.warned = True

        signal.signal(signal.SIGTERM, on_slurm_end)
        signal.signal(signal.SIGUSR1, on_time_limit)
    # caught, not ignored: an ignored SIGINT (a background start) would be inherited by the
    # run command, and Python then installs no KeyboardInterrupt for a stop to raise
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        sup.run()
    except Exception as e:  # the supervisor must leave a readable state behind
        import traceback

        agent_log(root, "supervisor {} crashed: {}\n{}".format(job_id, e, traceback.format_exc()))
        if sup.procs.running():
            sup.end_processes(10.0)
        sup.finish("failed", reason="agent error: {}".format(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Root(sys.argv[1]), sys.argv[2]))
