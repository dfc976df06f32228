"""The ``stop`` verb: done when the job's processes are gone, not when a request was written.

It writes the stop file and waits for the supervisor. A supervisor that does not act within
``GPUJOB_STOP_ACT_WITHIN`` seconds (frozen by ``kill -STOP``, a debugger, a stuck read: its
process is stopped, or its heartbeat stale) or that is gone is not waited for: the verb signals
the job's processes itself (each its stop signal, the grace, then SIGKILL), then SIGKILLs the
unresponsive supervisor (it would hold the job's locks forever). At the end it looks
for the job's processes once more, by every means (remote/stopping/find.py), ends what it finds,
and names in the answer (``survivors``) and in status.json whatever still runs.
"""

import functools
import os
import signal
import time
from typing import List, Mapping, Optional

from remote.core import locks, procs
from remote.core.jobrecord import JobRecord
from remote.core.layout import JobDir, Root, now, with_reserve
from remote.core.liveness import SlurmVerdict, Verdict, liveness
from remote.core.protocol import TERMINAL
from remote.core.spec import STOP_WAIT
from remote.jobs import store as jobs
from remote.stopping import after, late, slurmstop
from remote.stopping import cgroup as cg
from remote.stopping import find as jobfind
from remote.stopping import kill as jobkill

ACT_WITHIN = float(os.environ.get("GPUJOB_STOP_ACT_WITHIN", "5"))  # s the supervisor gets to show it acts
# a heartbeat this old: not acting (stuck in the kernel); longer than any wait of its own (a webhook's retries)
QUIET_AFTER = float(os.environ.get("GPUJOB_STOP_QUIET_AFTER", "60"))


def _finder(job: JobDir, st: JobRecord) -> jobkill.Finder:
    """The job's processes as status.json names them; a recorded pid counts only while it is still
    the job's (a pid the kernel gave to another process since must not lead us to its tree)."""
    sup, child, cgroup = st.supervisor_pid, st.child_pid, st.cgroup
    attempts = st.attempts or [{}]
    prefix = job.job_spec().path_prefix
    gpu_since = float(attempts[0].get("started_at") or 0) if st.cuda_visible_devices else 0.0

    def find() -> set:
        return jobfind.find(job.id, str(job.path), child if procs.belongs_to(child, job.id) else None,
                            reaper=sup if procs.belongs_to(sup, job.id) else None, cgroup=cgroup,
                            since=gpu_since, path_prefix=prefix)
    return find


def _write(job: JobDir, changes: Mapping[str, object], event: Optional[Mapping[str, object]] = None) -> bool:
    """Update status.json under the job's lock; a frozen supervisor may hold that lock: then after
    a few seconds the write is left out (False) rather than the verb hanging with it."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        with locks.flocked(job.path / "job.lock", blocking=False) as got:
            if got:
                st = job.record().update(**changes)
                with_reserve(functools.partial(job.write_record, st))
                if event:
                    job.event("state", **event)
                return True
        time.sleep(0.1)
    return False


def take_over(job: JobDir, st: JobRecord, why: str, grace: float) -> List[int]:
    """Stop the job's processes here (the supervisor did not): their stop signals, up to ``grace``
    s, then SIGKILL; the survivors."""
    find = _finder(job, st)
    asked = procs.ask_to_stop(job.id, None, str(job.path), pids=find())
    job.event("stop_takeover", why=why, signals={str(p): int(s) for p, s in asked.items()})
    with open(str(job.log), "a") as f:
        f.write("==> gpujob: stop: {}; the stop command signals the job's processes itself: {} [{}]\n".format(
            why, ", ".join(str(p) for p in sorted(asked)) or "none found", time.strftime("%Y-%m-%d %H:%M:%S")))
    killed, survivors = jobkill.end(find, grace, term=False, cgroup=st.cgroup)
    sup = st.supervisor_pid
    if sup and liveness(job, st, procs.boot_id()).runs:  # frozen or silent: it would hold the job's locks (resume refused) forever
        procs.signal_pids({sup}, signal.SIGKILL)
    changes = {"state": "stopped", "reason": st.stopping or "stopped by user", "ended_at": now(),
               "killed": killed, "survivors": survivors, "child_pid": None,
               "supervisor_unresponsive": why}
    _write(job, changes, {"state": "stopped", "reason": changes["reason"]})
    return survivors


def _sup_state(verdict: Verdict) -> str:
    """Why the supervisor cannot be waited for ('' while it works): gone, frozen, or silent."""
    sup = verdict.sup
    if not sup or not verdict.runs:
        return "" if verdict.starting else "the supervisor is gone"  # a queued job's may not be named yet
    frozen = jobfind.frozen(sup)
    if frozen:
        return "the supervisor (pid {}) is {}".format(sup, frozen)
    quiet = now() - float(verdict.record.heartbeat or 0)
    if quiet > QUIET_AFTER:
        return "the supervisor (pid {}) has not written its heartbeat for {:.0f} s".format(sup, quiet)
    return ""


def stop(root: Root, job_id: str, wait: float = STOP_WAIT, reason: str = "stopped by user",
         after_checkpoint: Optional[float] = None, job_mode: bool = False) -> Mapping[str, object]:
    """Stop the job and verify it: the answer is its record after the stop (the ``stop`` verb answers
    it as status shows it, with ``survivors``: remote/verbs/jobs.py ``stopped``).

    ``after_checkpoint``: the most seconds to wait for a new complete checkpoint before stopping
    (remote/stopping/after.py; negative: twice the job's usual interval between them);
    ``job_mode``: as the job file's ``stop: {mode: ...}`` says (``move``)."""
    job = root.job(job_id)
    boot = procs.boot_id()
    st, verdict = jobs.judged(root, job, boot)
    spec = job.job_spec()
    if job_mode and after_checkpoint is None and spec.stop.mode == "checkpoint":
        after_checkpoint = spec.stop.max_wait if spec.stop.max_wait else -1.0
    if isinstance(verdict, SlurmVerdict):  # its processes are on a compute node: its supervisor and Slurm end them
        slurmstop.stop(job, verdict, wait, reason, after_checkpoint, _write)
        return job.record().to_dict()
    start = time.monotonic()
    deadline = start + wait
    if st.state not in TERMINAL:
        late.note_if_ended(job, st.child_pid, st.supervisor_pid)
        if after_checkpoint is not None and st.state == "running":
            after.request(job, after_checkpoint if after_checkpoint >= 0 else None, reason,
                          pattern=spec.checkpoint.pattern,
                          pids=lambda: procs.job_pids(job.id, job_dir=str(job.path)))
        else:
            with_reserve(lambda: job.stop_file.write_text(reason + "\n"))
            job.event("stop_requested", reason=reason)
        while time.monotonic() < deadline:
            st = job.record()
            if st.state in TERMINAL:
                break
            verdict = liveness(job, st, boot)
            why = _sup_state(verdict) if time.monotonic() - start >= ACT_WITHIN or not verdict.runs else ""
            if why:
                if not st.has("stopping"):
                    st.stopping = reason
                grace = min(job.job_spec().stop.grace, max(deadline - time.monotonic(), 5.0))
                take_over(job, st, why, grace)
                break
            time.sleep(0.2)
    elif st.state == "lost":
        jobs.mark_lost(root, job, st)
    return verify(root, job)


def verify(root: Root, job: JobDir) -> Mapping[str, object]:
    """The job's record after a stop: a finished job's leftovers are ended here (SIGKILL after 3 s);
    a job still stopping (its grace not over) is left to it (``survivors`` names what still runs)."""
    st = job.record()
    if st.state in TERMINAL:
        _, survivors = jobkill.end(_finder(job, st), 3.0, cgroup=st.cgroup)
        if not survivors:
            cg.remove(st.cgroup)
        if survivors != st.survivors:
            _write(job, {"survivors": survivors})
    return job.record().to_dict()


def survivors(job: JobDir) -> List[int]:
    """The job's processes that still run, by every means (the stop verb's answer names them)."""
    return sorted(_finder(job, job.record())())
