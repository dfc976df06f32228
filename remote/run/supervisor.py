"""The supervisor (``python3 -m remote run JOB``): runs a job's attempts until it ends.

Started detached (its own session) by ``submit``, so it outlives the SSH connection.
It owns ``status.json`` (written atomically, with a heartbeat), ``events.jsonl`` and the
attempt markers in ``output.log``.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from remote.core import layout, locks, procs
from remote.core.layout import JobDir, Root, agent_log, now, with_reserve
from remote.core.protocol import backoff
from remote.env.jobenv import PATH_PREFIX
from remote.run import launch
from remote.stopping import after, late, reaper
from remote.stopping import cgroup as cg
from remote.stopping import find as jobfind
from remote.stopping import kill as jobkill

HEARTBEAT = float(os.environ.get("GPUJOB_HEARTBEAT", "5"))
TICK = 0.25
ROTATE_EVERY = 5.0  # seconds between checkpoint rotations while a job runs
QUEUE_POLL = float(os.environ.get("GPUJOB_QUEUE_POLL", "5"))
MAX_WAIT = 3600.0  # the longest wait between two attempts
# causes that restart a failed attempt when retry.on is not given: a signal gpujob did not send
# (a watchdog, the platform, the OOM killer without evidence) is one a user expects to survive
DEFAULT_RETRY_ON = ["error", "oom", "signal"]


def _events():
    from remote.run import events

    return events


def _checkpoints():
    from remote.ckpt import checkpoints

    return checkpoints


def latest_resume(ckpt_dir: Path, pattern: Optional[str] = None, pids: Any = None) -> str:
    """The newest complete checkpoint (a folder, or the file itself for single-file kinds), or ''
    (what GPUJOB_RESUME holds)."""
    try:
        found = _checkpoints().latest_complete(ckpt_dir, pattern, pids)
    except ImportError:
        return ""
    return str(found) if found else ""


def why_from_start(ckpt_dir: Path, pattern: Optional[str] = None) -> str:
    """Why an attempt starts without GPUJOB_RESUME though checkpoints are there (a GPT trainer's one
    ckpt.pt cut short by a kill while it was overwritten): the newest incomplete ones and their reasons."""
    try:
        bad = [c for c in _checkpoints().find(ckpt_dir, pattern) if not c.complete]
    except ImportError:
        return ""
    if not bad:
        return ""
    return " from the beginning: no complete checkpoint to resume from ({})".format(
        "; ".join("{}: {}".format(c.rel(ckpt_dir), c.reason) for c in bad[-3:]))


# fields of an attempt's end that must not outlive it: a recovered job shows none of them
ATTEMPT_END_FIELDS = ("reason", "exit_code", "lost_reason", "diagnosis", "remedy", "next_attempt_at",
                      "stopping", "killed", "survivors")


class Rotator:
    """A watcher: every few seconds, delete old checkpoints beyond ``checkpoint_keep``.

    ``checkpoints.rotate`` never deletes the newest complete checkpoint, the one the attempt
    resumed from, one still being written (open for writing by a process of the job), nor
    Lightning's ``last*.ckpt``.
    """

    def __init__(self, ckpt_dir: Path, keep: int, pattern: Optional[str] = None) -> None:
        self.ckpt_dir, self.keep, self.pattern, self.next_at = ckpt_dir, keep, pattern, 0.0

    def tick(self, sup: Any) -> Optional[str]:
        if time.monotonic() >= self.next_at:
            self.next_at = time.monotonic() + ROTATE_EVERY
            self.rotate(sup)
        return None

    def rotate(self, sup: Any) -> None:
        if self.keep <= 0 or not self.ckpt_dir.is_dir():
            return
        attempts = sup.status.get("attempts") or []
        resume = attempts[-1].get("resume") if attempts else None
        # what the mirror is sending stays until it is up (a slow upload would lose its source)
        sending = sup.mirror.sending() if getattr(sup, "mirror", None) is not None else []
        try:
            deleted = _checkpoints().rotate(self.ckpt_dir, self.keep, self.pattern, pids=sup.job_pids,
                                            protect=([resume] if resume else []) + sending)
        except Exception as e:  # never let housekeeping take the job down
            agent_log(sup.root, "rotation in {} failed: {}".format(self.ckpt_dir, e))
            return
        if deleted:
            sup.job.event("rotated", deleted=[p.name for p in deleted])


class Supervisor:
    """One job's life: attempts, restarts, stop requests, the final state."""

    def __init__(self, root: Root, job: JobDir) -> None:
        self.root, self.job = root, job
        self.spec: Dict[str, Any] = job.spec_data()
        self.status: Dict[str, Any] = job.status()
        self.child: Optional[subprocess.Popen] = None
        self.last_beat = 0.0
        self.stop_reason: Optional[str] = None
        self.exit_clock: Optional[late.ExitClock] = None  # when this attempt's run command ended
        self.signalled = False  # a stop signal was sent to this attempt's processes
        self.terminated = False
        self.oom: Any = None  # remote.host.oom.Watch of the running attempt
        self.cgroup: Optional[str] = None  # the attempt's cgroup, where the host lets us make one
        self.watchers: List[Any] = []  # objects with tick(sup) -> Optional[reason to stop]
        self.add_own_watchers()
        _events().attach(self)  # notifications and auto-stop policies

    def add_own_watchers(self) -> None:
        """GPU sampling into gpu.jsonl and checkpoint rotation run beside every attempt."""
        from remote.host import gpus

        # the host profile's env (spec host_env), then <root>/agent.env / the agent's environment
        interval = float((self.spec.get("host_env") or {}).get("GPUJOB_GPU_SAMPLE")
                         or os.environ.get("GPUJOB_GPU_SAMPLE", "5"))
        self.sampler = gpus.Sampler(self.job.gpu, interval, self.path_prefix())
        # first: once its checkpoint landed, a stop asked for "after the next checkpoint" goes before any other
        self.watchers.insert(0, after.Watch(self.job, self.ckpt_dir(), self.spec.get("checkpoint_pattern")))
        self.watchers.append(self.sampler)
        self.watchers.append(Rotator(self.ckpt_dir(), int(self.spec.get("checkpoint_keep", 3) or 0),
                                     self.spec.get("checkpoint_pattern")))
        self.keeper = None  # checkpoint.backup: a copy of each checkpoint file the script rewrites in place
        if self.spec.get("checkpoint_backup", True):
            from remote.ckpt.keepcopy import Keeper

            self.keeper = Keeper(self.job, self.ckpt_dir(), self.spec.get("checkpoint_pattern"), self.log_marker,
                                 say=self.kept_copy_given_up)
            self.watchers.append(self.keeper)
        from remote.metrics.metricsrc import Collector  # metrics from TensorBoard events and the log

        self.collector = Collector(self.job, self.spec, float(self.status.get("submitted_at") or now()))
        self.watchers.append(self.collector)
        self.mirror = None  # checkpoint.mirror: uploads each complete checkpoint (remote/mirror)
        mirror_cfg = self.spec.get("checkpoint_mirror") or {}
        if mirror_cfg.get("targets"):
            from remote.run.mirror import Mirror

            self.mirror = Mirror(self, mirror_cfg)
            self.watchers.append(self.mirror)

    def job_pids(self) -> List[int]:
        """The job's live processes (for "open for writing"); remembered for the OOM evidence."""
        pids = procs.job_pids(self.job.id, self.child.pid if self.child else None, str(self.job.path))
        if self.oom is not None:
            self.oom.pids.update(pids)
        return sorted(pids)

    def all_pids(self) -> List[int]:
        """Every process of the job, by every means (remote/stopping/find.py): what a stop must end."""
        attempts = self.status.get("attempts") or [{}]
        gpu_since = float(attempts[0].get("started_at") or 0) if self.status.get("cuda_visible_devices") else 0.0
        return sorted(jobfind.find(self.job.id, str(self.job.path), self.child.pid if self.child else None,
                                   reaper=os.getpid(), cgroup=self.cgroup, path_prefix=self.path_prefix(),
                                   since=gpu_since))

    def cheap_pids(self) -> set:
        return set(procs.job_pids(self.job.id, self.child.pid if self.child else None, str(self.job.path))) \
            | cg.pids(self.cgroup)

    def end_processes(self, grace: float, term: bool = True) -> List[int]:
        """End every process of the job (SIGTERM unless asked already, ``grace``, SIGKILL); the pids
        it had to SIGKILL. Survivors are named in status and the log (a stop then says so)."""
        killed, survivors = jobkill.end(lambda: set(self.all_pids()), grace, poll=self.tick_wait, cgroup=self.cgroup,
                                        cheap=self.cheap_pids, term=term)
        if killed:
            self.job.event("killed", pids=killed)
        if survivors:
            self.status["survivors"] = survivors
            self.log_marker("stop: process(es) {} still run after SIGKILL (another user's, or stuck in the kernel)"
                            .format(", ".join(map(str, survivors))))
        else:
            self.status.pop("survivors", None)
        return killed

    def tick_wait(self) -> None:
        """While waiting on the job: reap the run command and orphans (we are their subreaper), beat."""
        if self.child is not None:
            self.child.poll()
        self.reap_orphans()
        self.heartbeat()

    def reap_orphans(self) -> None:
        """Collect the job's orphans that ended (double-forked daemons reparented to us): not the run
        command (Popen waits for it) and not our own helpers (our session: subprocess waits for those)."""
        me = os.getpid()
        own = jobfind._stat(me)[3:4]
        kids = {c for c, p in procs._parents().items() if p == me and (self.child is None or c != self.child.pid)}
        reaper.reap({c for c in kids if jobfind._stat(c)[3:4] != own})

    def path_prefix(self) -> str:
        """The host profile's PATH prefix (where nvidia-smi may live), if any."""
        return (self.spec.get("host_env") or {}).get("GPUJOB_PATH_PREFIX", "")

    # ---- status -------------------------------------------------------------------------
    def save(self, **changes: Any) -> None:
        self.status.update(changes)
        self.status["heartbeat"] = now()
        with locks.job_lock(self.job.path):
            self.job.write_status(self.status)
        self.last_beat = time.monotonic()
        from remote.view.observe import index_log_size  # T SIZE of output.log, for tail --since

        index_log_size(self.job)

    def set_state(self, state: str, **changes: Any) -> None:
        old = self.status.get("state")
        self.save(state=state, **changes)
        if old != state:
            self.job.event("state", state=state, **{k: v for k, v in changes.items() if k in ("reason", "exit_code", "attempt")})

    def log_marker(self, text: str) -> None:
        try:
            with open(str(self.job.log), "a") as f:
                f.write("==> gpujob: {} [{}]\n".format(text, time.strftime("%Y-%m-%d %H:%M:%S")))
        except OSError as e:  # a full disk: the marker is lost, the job's life goes on
            agent_log(self.root, "{}: could not write a log marker: {}".format(self.job.id, e))

    # ---- one attempt --------------------------------------------------------------------
    def env(self, attempt: int, resume: str) -> Dict[str, str]:
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("GPUJOB_") or k == "PYTHONPATH":
                env.pop(k)
        job = self.job
        ckpt = self.ckpt_dir()
        ckpt.mkdir(parents=True, exist_ok=True)
        tb = self.spec.get("tensorboard_logdir")
        tb_dir = str((job.code / tb).resolve()) if tb else str(job.tb)
        env.update({
            "GPUJOB_JOB_ID": job.id,
            "GPUJOB_JOB_DIR": str(job.path),
            "GPUJOB_CKPT_DIR": str(ckpt),
            "GPUJOB_TB_DIR": tb_dir,
            "GPUJOB_RESUME": resume,
            "GPUJOB_ATTEMPT": str(attempt),
            "GPUJOB_METRICS_FILE": str(job.metrics),
            "GPUJOB_STOP_FILE": str(job.stop_file),
            "GPUJOB_KEEP": str(self.spec.get("checkpoint_keep", 3)),
            "GPUJOB_BATCH_DIVISOR": str(self.status.get("batch_divisor", 1)),
            "GPUJOB_DATA_DIR": str(self.data_dir()),
            "PYTHONPATH": os.pathsep.join(self.runtime_path() + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
            "PYTHONUNBUFFERED": "1",
        })
        env.setdefault("HF_HOME", str(self.root.root / "cache" / "huggingface"))
        if self.status.get("cuda_visible_devices") is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.status["cuda_visible_devices"]
        env.update(launch.node_env(self.launch_spec()))
        env.update(self.spec.get("host_env") or {})
        env.update(self.spec.get("env") or {})
        if (self.spec.get("env") or {}).get("PYTHONPATH") is not None:  # the user's own path comes after ours
            env["PYTHONPATH"] = os.pathsep.join(self.runtime_path() + [env["PYTHONPATH"]])
        wanted = set(self.spec.get("secrets") or [])  # notification keys stay with the agent
        env.update({k: v for k, v in self.job.secrets_data().items() if k in wanted})
        # the job's identity wins over any env: stop finds the job's processes by it
        env.update(GPUJOB_JOB_ID=job.id, GPUJOB_JOB_DIR=str(job.path), GPUJOB_STOP_FILE=str(job.stop_file),
                   GPUJOB_ATTEMPT=str(attempt), GPUJOB_RESUME=resume)
        return env

    def data_dir(self) -> Path:
        """The job's own data view (remote/data/datastore.py); a job made by an older agent has none and
        keeps the shared ``<root>/data`` it was submitted with."""
        view = self.job.path / "data"
        return view if view.is_dir() else self.root.data

    def runtime_path(self) -> List[str]:
        """What the run command gets on PYTHONPATH: the runtime helper and, unless
        ``runtime: {auto: false}``, the hook that adds gpujob's stop callback to Trainers."""
        runtime = layout.AGENT_DIR / "runtime"
        hook = [str(runtime / "autohook")] if self.spec.get("runtime_auto", True) else []
        return hook + [str(runtime)]

    def launch_spec(self) -> Dict[str, Any]:
        """The spec plus the GPUs this job was given (``gpus: all`` counts those)."""
        return dict(self.spec, allocated=self.status.get("cuda_visible_devices"))

    def ckpt_dir(self) -> Path:
        """``<job>/ckpt``, or ``<checkpoint.dir>/<job id>`` on shared storage (multi-node).

        A relative ``checkpoint.dir`` is a folder the script writes in its code: that folder
        becomes a link to ``<job>/ckpt`` (see link_code_dir)."""
        shared = self.spec.get("checkpoint_dir")
        if not shared or not (shared.startswith("/") or shared.startswith("~")):
            return self.job.ckpt
        path = Path(os.path.expanduser(shared)) / self.job.id
        if not os.path.lexists(str(self.job.ckpt)):
            path.mkdir(parents=True, exist_ok=True)
            os.symlink(str(path), str(self.job.ckpt))  # status and pull see it as <job>/ckpt
        return path

    def link_code_dir(self, rel: str) -> None:
        """Make ``<job>/ckpt`` a link to ``<job>/code/<rel>``, a real folder: the script may
        ``shutil.rmtree`` it (a link there failed every attempt: "Cannot call rmtree on a symbolic
        link") and make it again, and ``<job>/ckpt`` still leads to what it writes, where restarts,
        ``resume``, status, rotation and pull find it. What an earlier ``ckpt/`` held (a move
        brought it) goes into the folder first. A job started with the older, opposite link
        (``code/<rel>`` -> ``ckpt``) keeps it."""
        ckpt, out = self.job.ckpt, self.job.code / rel
        if out.is_symlink():
            return
        if os.path.lexists(str(out)) and not out.is_dir():
            raise OSError("checkpoint.dir {} is a file in the code, not a folder".format(rel))
        out.mkdir(parents=True, exist_ok=True)  # again, if the script removed it
        if ckpt.is_symlink():
            return
        if ckpt.is_dir():
            for entry in sorted(os.listdir(str(ckpt))):
                if not os.path.lexists(str(out / entry)):
                    os.rename(str(ckpt / entry), str(out / entry))
            shutil.rmtree(str(ckpt))
        os.symlink(os.path.relpath(str(out), str(ckpt.parent)), str(ckpt))

    def link_ckpt_to_code(self) -> None:
        """``checkpoint.dir: .`` (the script saves into its working folder): ``<job>/ckpt`` becomes a
        link to the code, so resume, status, rotation and pull see those files (the spec's pattern
        says which). What an earlier ``ckpt/`` held (a move brought it) goes into the code first."""
        ckpt = self.job.ckpt
        if ckpt.is_symlink():
            return
        if ckpt.is_dir():
            for entry in sorted(os.listdir(str(ckpt))):
                if not os.path.lexists(str(self.job.code / entry)):
                    os.rename(str(ckpt / entry), str(self.job.code / entry))
            shutil.rmtree(str(ckpt))
        os.symlink("code", str(ckpt))

    def start_attempt(self, attempt: int) -> None:
        rel = self.spec.get("checkpoint_dir")
        if rel and not (rel.startswith("/") or rel.startswith("~")):
            if Path(rel).parts:
                self.link_code_dir(rel)
            else:
                self.link_ckpt_to_code()
        self.restore_kept(attempt)
        resume = latest_resume(self.ckpt_dir(), self.spec.get("checkpoint_pattern"), self.job_pids)
        for k in ATTEMPT_END_FIELDS:  # the previous attempt's end is history (attempts, events)
            self.status.pop(k, None)
        for mark in (".watch", ".acted", ".ended"):  # each attempt acknowledges the stop file afresh (a Trainer hook: at its first step)
            try:
                os.unlink(str(self.job.stop_file) + mark)
            except OSError:
                pass
        how = " (resume from {})".format(resume) if resume else why_from_start(self.ckpt_dir(), self.spec.get("checkpoint_pattern"))
        self.log_marker("attempt {} started{}".format(attempt, how))
        self.cgroup, why = cg.create(str(self.job.path))
        if why and not self.status.get("cgroup_note"):
            self.status["cgroup_note"] = "no per-job cgroup ({}): a stop finds the job's processes by tree, " \
                "session, environment, open files and GPU use".format(why)
        log = open(str(self.job.log), "ab")
        try:
            self.child = subprocess.Popen(
                ["bash", "-lc", cg.enter_line(self.cgroup) + PATH_PREFIX + launch.command(self.launch_spec(), attempt)], cwd=str(self.job.code), env=self.env(attempt, resume),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        finally:
            log.close()
        self.exit_clock, self.signalled = late.ExitClock(self.child.pid), False  # a stop after its end changes nothing
        if self.oom is not None:
            self.oom.pids.add(self.child.pid)
        attempts = self.status.setdefault("attempts", [])
        attempts.append({"n": attempt, "started_at": now(), "resume": resume, "pid": self.child.pid,
                         "batch_divisor": int(self.status.get("batch_divisor", 1))})
        self.set_state("running", attempt=attempt, child_pid=self.child.pid, started_at=self.status.get("started_at") or now(),
                       cgroup=self.cgroup)
        _events().started(self)

    def kept_copy_given_up(self, text: str) -> None:
        """The kept copy made way for the job's own writes: status shows it from the next beat on."""
        self.status["kept_copy"] = text
        self.job.event("kept_copy_given_up", reason=text)

    def restore_kept(self, attempt: int) -> None:
        """A checkpoint file rewritten in place and cut short by the kill that ended the last attempt (or
        the host's end) gets its kept last complete version back before the attempt starts."""
        if self.keeper is None:
            return
        from remote.ckpt import keepcopy

        self.keeper.wait()  # a copy under way lands (or is dropped) first
        try:
            restored = keepcopy.restore(self.job.path, self.ckpt_dir(), self.spec.get("checkpoint_pattern"))
        except OSError as e:  # a full disk: the attempt starts as it would have without the copy
            self.log_marker("could not restore the kept copy of a checkpoint: {}".format(e))
            return
        for rel, step in restored:
            said = "{} restored from the copy kept of its last complete version{} (the save in place was cut " \
                   "short or the file is gone)".format(rel, " (step {})".format(step) if step is not None else "")
            self.log_marker(said)
            self.status["restored"] = "before attempt {}: {}".format(attempt, said)
            self.job.event("restored", name=rel, step=step)

    def note_stray_checkpoints(self) -> None:
        """Checkpoints written where gpujob does not look (no checkpoint.dir): the log says how
        to fix the job file once, since the next attempt gets no GPUJOB_RESUME from them."""
        if self.status.get("stray_noted") or latest_resume(self.ckpt_dir(), self.spec.get("checkpoint_pattern")):
            return
        from remote.jobs.saved import stray_checkpoints

        try:
            stray = stray_checkpoints(self.job, self.spec, self.status)
        except Exception as e:  # a hint must never take the job down
            agent_log(self.root, "{}: looking for checkpoints in the code failed: {}".format(self.job.id, e))
            return
        if stray:
            self.status["stray_noted"] = True
            self.log_marker(stray["advice"])

    def gpu_error(self, found: str) -> Optional[str]:
        """A new GPU error during the attempt: kept as a diagnosis, announced; with ``retry.move_after``
        the job stops (its code saves a checkpoint) so that ``gpujob guard`` moves it to a sound host."""
        self.save(gpu_error=found)
        self.log_marker("GPU error: " + found)
        self.job.event("gpu_error", error=found)
        _events().emit(self, "gpu_error", reason=found)
        if (self.spec.get("retry") or {}).get("move_after") is not None:
            return "gpu_error: " + found
        return None

    def stop_requested(self) -> Optional[str]:
        if self.terminated:
            return "agent terminated"
        try:
            text = self.job.stop_file.read_text().strip()
        except OSError:
            # a stop after the next checkpoint, with no attempt running to write one: now
            req = after.pending(self.job) if self.child is None or self.child.poll() is not None else None
            return str(req.get("reason") or "stop requested") if req else None
        return text or "stop requested"

    def stop_child(self, reason: str, saved: bool = False) -> None:
        """Stop the attempt: the stop file; then, for code that watches it, the grace to save
        before SIGTERM/SIGKILL; for code that does not, a stop signal to each process chosen
        for where it listens (procs.stop_signal), the grace, then SIGKILL of what is left.
        ``saved``: the checkpoint the stop waited for is complete, nothing is left to save: the
        grace is a few seconds (after.LANDED_GRACE)."""
        self.stop_reason = reason
        self.save(stopping=reason)
        if not self.job.stop_file.exists():
            with_reserve(lambda: self.job.stop_file.write_text(reason + "\n"))
        grace = float(self.spec.get("stop_grace", 120))
        if saved:
            grace = min(grace, after.LANDED_GRACE)
        assert self.child is not None
        watching = Path(str(self.job.stop_file) + ".watch").exists()
        if watching:  # the runtime helper (or the Trainer hook) polls the stop file: give it the grace to save
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and self.child.poll() is None:
                self.tick_wait()
                time.sleep(TICK)
            grace, term = (grace if saved else 10.0), True
        else:
            grace, term = self.ask_to_stop(self.wait_for_saves(grace)), False
        rc = self.child.poll()
        if rc is not None:  # the log says which happened: it left on its own, or gpujob ended it
            self.log_marker("stop: the run command exited with code {} after the stop request{}".format(
                rc, " (it caught the stop and finished on its own: the job is stopped, not succeeded)" if rc == 0 else ""))
        killed = self.end_processes(grace, term=term)
        if killed:
            self.status["killed"] = killed
        if rc is None:
            self.child.wait()
            self.log_marker("stop: {} (exit status {})".format(
                "still running after the grace: SIGKILL of pid(s) " + ", ".join(map(str, killed)) if killed
                else "ended by the stop signal", self.child.returncode))

    def wait_for_saves(self, grace: float) -> float:
        """A script that never looks at the stop file gets a signal, and one in the middle of ``torch.save``
        (a GPT trainer overwriting its one ckpt.pt) leaves it cut short: all its work lost. While a process
        of the job writes a checkpoint file, wait (up to 3/4 of the grace); returns the grace left."""
        assert self.child is not None
        start, said = time.monotonic(), False
        while time.monotonic() - start < 0.75 * grace and self.child.poll() is None:
            try:
                busy = _checkpoints().being_saved(self.ckpt_dir(), self.job_pids)
            except (ImportError, OSError):
                break
            if not busy:
                break
            if not said:
                said = True
                self.log_marker("stop: waiting for {} to be written first (a signal now would cut it short)".format(
                    os.path.basename(busy[0])))
            self.tick_wait()
            time.sleep(TICK)
        return max(0.0, grace - (time.monotonic() - start))

    def ask_to_stop(self, grace: float) -> float:
        """Signal the job's processes (SIGINT or SIGTERM each) and wait up to ``grace`` for them;
        returns how long the rest may take before SIGKILL (0 when the grace ran out)."""
        assert self.child is not None
        asked = procs.ask_to_stop(self.job.id, self.child.pid, job_dir=str(self.job.path), pids=set(self.all_pids()))
        self.signalled = self.signalled or bool(asked)
        names = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}
        shown = round(grace, 1) if grace < 10 else round(grace)  # what is left of it: 59.996 s reads 60 s
        self.log_marker("stop: {} (grace {:g}s, then SIGKILL)".format(
            ", ".join("pid {} {}".format(p, names.get(s, s)) for p, s in sorted(asked.items())) or "no process to ask",
            shown))
        self.job.event("stop_signals", signals={str(p): names.get(s, s) for p, s in asked.items()})
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(procs.pid_alive(p) for p in asked):
            self.tick_wait()  # reap the run command's shell
            time.sleep(TICK)
        return 0.0 if time.monotonic() >= deadline else 5.0

    def heartbeat(self) -> None:
        if time.monotonic() - self.last_beat >= HEARTBEAT:
            try:
                self.save()
            except OSError as e:  # a full disk: skip this beat (the final state uses the reserve)
                self.last_beat = time.monotonic()
                agent_log(self.root, "{}: heartbeat not written: {}".format(self.job.id, e))

    def wait_attempt(self) -> int:
        assert self.child is not None
        while True:
            rc = self.child.poll()
            if rc is not None:
                # the main process ended: no straggler of this attempt may survive it
                self.end_processes(5.0)
                cg.remove(self.cgroup)
                # code that watches the stop file may save and exit before this loop sees the
                # request: the attempt still ended because of it (stopped, not succeeded or retried)
                self.stop_reason = self.stop_reason or self.stop_requested()
                return rc
            reason, by = self.stop_requested(), None
            for w in self.watchers:
                if not reason:
                    reason, by = w.tick(self), w
            if reason and reason.startswith("autostop") and not isinstance(by, after.Watch) \
                    and self.spec.get("stop_mode") == "checkpoint":
                if not after.pending(self.job):  # stop: {mode: checkpoint}: the next checkpoint first
                    req = after.request(self.job, self.spec.get("stop_max_wait"), reason, self.ckpt_dir(),
                                        self.spec.get("checkpoint_pattern"), self.job_pids)
                    self.log_marker("{}: stopping after the next checkpoint (at most {:g} s)".format(
                        reason, req["max_wait"]))
                reason = None
            if reason:
                self.stop_child(reason, saved=isinstance(by, after.Watch) and by.landed)
                cg.remove(self.cgroup)
                return self.child.returncode
            self.reap_orphans()
            self.heartbeat()
            time.sleep(TICK)

    # ---- the job ------------------------------------------------------------------------
    def should_retry(self, attempt: int, rc: int, cause: str) -> bool:
        retry = self.spec.get("retry") or {}
        if attempt > int(retry.get("max_restarts", 0)):
            return False
        on = retry.get("on") or DEFAULT_RETRY_ON
        return cause in on or (cause not in ("oom", "nan", "nccl", "signal") and "error" in on)

    def classify(self, rc: int) -> Dict[str, Any]:
        """The diagnosis of the attempt that just ended (its part of the log, its exit status)."""
        from remote.run import diagnose

        killed = self.oom.killed() if rc in (137, -9) and self.oom is not None else None
        return diagnose.diagnose(self.job.log, rc, metrics=self.job.metrics, oom_killed=killed)

    # ---- GPUs and the queue -------------------------------------------------------------
    def take_gpus(self) -> Optional[str]:
        """Wait in the host's FIFO queue until the GPUs the job asks for are free.

        Returns None once CUDA_VISIBLE_DEVICES is set, or the reason the job cannot run.
        """
        from remote.host import gpus

        n = gpus.wanted(self.spec)
        if n is None:
            if self.spec.get("gpus") == "auto":  # said where the user looks (tail, --follow), on any host
                self.log_marker("no GPU on this host (no nvidia-smi): gpus: auto runs the job on its CPU")
            return None
        self.set_state("queued", waiting_for_gpus=True, gpus_held=False, cuda_visible_devices=None)
        told = None
        while True:
            if self.stop_requested():
                return "stopped while queued"
            with gpus.Lock(self.root):
                first = (gpus.queue(self.root) or [self.job.id])[0] == self.job.id
                res = gpus.try_allocate(self.root, self.job.id, n, self.path_prefix()) if first else None
                if res and res["ok"]:
                    self.save(cuda_visible_devices=res["devices"], gpus_held=True, waiting_for_gpus=False,
                              queue_reason=None)
                    self.job.event("gpus", devices=res["devices"])
                    return None
            if res and res.get("fatal"):
                return res["why"]
            why = res["why"] if res else "waiting behind earlier jobs in this host's queue"
            if why != told:
                self.log_marker(why)
                told = why
            self.save(queue_reason=why)
            deadline = time.monotonic() + QUEUE_POLL
            while time.monotonic() < deadline and not self.stop_requested():
                self.heartbeat()
                time.sleep(TICK)

    def run(self) -> str:
        self.save(supervisor_pid=os.getpid(), boot_id=procs.boot_id(), agent=str(layout.AGENT_DIR.name))
        attempt = int(self.status.get("attempt") or 0)
        cannot = self.take_gpus()
        if cannot:
            if self.stop_requested():
                return self.finish("stopped", reason=cannot, exit_code=None)
            return self.finish("failed", reason=cannot, exit_code=None,
                               remedy="submit to a host with enough GPUs (gpujob doctor HOST lists them), or lower gpus:")
        from remote.env import provision  # setup:/requirements:/python: once per content hash

        try:
            self.spec["host_env"] = dict(self.spec.get("host_env") or {}, **provision.ensure(
                self.root, self.job, self.spec, tick=lambda: self.heartbeat() or self.stop_requested()))
        except provision.SetupFailed as e:
            stop = self.stop_requested()
            return self.finish("stopped" if stop else "failed", reason=stop or "setup failed", exit_code=e.rc)
        try:  # tunnel, doctor and exec run what the job runs
            from remote.env import jobenv

            jobenv.record(self.job, self.spec)
        except OSError as e:
            agent_log(self.root, "env.json of {} not written: {}".format(self.job.id, e))
        while True:
            if self.stop_requested():
                return self.finish("stopped", reason=self.stop_requested(), exit_code=None)
            attempt += 1
            from remote.host import oom

            self.oom = oom.Watch()
            try:
                self.start_attempt(attempt)
            except OSError as e:
                self.log_marker("could not start the run command: {}".format(e))
                return self.finish("failed", reason="could not start: {}".format(e), exit_code=None)
            rc = self.wait_attempt()
            record = self.status["attempts"][-1]
            record.update(ended_at=now(), exit_code=rc)
            self.log_marker("attempt {} ended with exit code {}".format(attempt, rc))
            self.note_stray_checkpoints()
            for w in self.watchers:
                if isinstance(w, Rotator):
                    w.rotate(self)
            self.collector.collect(final=True)  # the attempt's last lines and events, before any notification
            if self.stop_reason and late.ended_on_its_own(rc, self.exit_clock and self.exit_clock.at, self.job.stop_file,
                                                          self.job.path / "stop.after", self.signalled):
                record["stop_came_late"] = self.stop_reason  # e.g. a sweep's budget stop after its last step
                self.log_marker("the run command had ended on its own (exit 0) when the stop ({}) reached it: "
                                "the job succeeded".format(self.stop_reason))
                return self.finish("succeeded", exit_code=0, stopping=None, stop_came_late=self.stop_reason)
            if self.stop_reason:
                record["reason"] = self.stop_reason
                state = "autostopped" if self.stop_reason.startswith("autostop") else "stopped"
                return self.finish(state, reason=self.stop_reason, exit_code=rc)
            if rc == 0:
                return self.finish("succeeded", exit_code=0)
            diag = self.classify(rc)
            cause = diag["cause"]
            record.update(reason=cause, summary=diag.get("summary"))
            self.status["diagnosis"] = diag  # status shows what the log says, not a second opinion
            if not self.should_retry(attempt, rc, cause):
                self.log_marker("attempt {} failed: {}; no restart".format(attempt, diag.get("summary")))
                return self.finish("failed", reason=cause, exit_code=rc)
            retry = self.spec.get("retry") or {}
            if cause == "oom" and diag.get("gpu") and retry.get("on_oom") == "halve_batch":
                self.status["batch_divisor"] = int(self.status.get("batch_divisor", 1)) * 2
                self.log_marker("CUDA out of memory: restarting with GPUJOB_BATCH_DIVISOR={}".format(
                    self.status["batch_divisor"]))
            else:
                self.log_marker("attempt {} failed: {}; restarting".format(attempt, diag.get("summary")))
            # attempts before a resume or a move do not count: the wait starts again from retry.backoff
            wait = backoff(attempt - int(self.status.get("restart_base", 0)), float(retry.get("backoff", 10)), MAX_WAIT)
            self.set_state("restarting", reason=cause, exit_code=rc, next_attempt_at=now() + wait)
            self.job.event("restart", attempt=attempt + 1, cause=cause, exit_code=rc)
            _events().emit(self, "restarted", reason=diag.get("summary") or cause, diagnosis=diag.get("summary"))
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and not self.stop_requested():
                self.heartbeat()
                time.sleep(TICK)
            gone = self.gpus_gone()
            if gone and not self.stop_requested():  # a restart there would fail again, or train on the CPU for hours
                self.log_marker("no restart: {}".format(gone))
                return self.finish("failed", reason=gone, exit_code=rc,
                                   remedy="gpujob resume {0} once the instance has its GPUs again (from the newest "
                                          "complete checkpoint), or gpujob move {0} --to HOST".format(self.job.id))

    def gpus_gone(self) -> str:
        """Why the GPUs the job asks for are gone from this host now (the driver failed, the instance
        came back without them), else ""."""
        from remote.host import gpus

        n = gpus.wanted(self.spec)
        return gpus.lacking(*gpus.probe(self.path_prefix()), n) if n is not None else ""

    def finish(self, state: str, **changes: Any) -> str:
        after.clear(self.job)  # a stop after a checkpoint still waited for is moot now
        if self.keeper is not None:  # a copy under way lands rather than leaving its temporary file behind
            self.keeper.wait(30.0)
        self.set_state(state, ended_at=now(), child_pid=None, gpus_held=False, waiting_for_gpus=False, **changes)
        self.job.event("finished", state=state)
        _events().on_finish(self, state)  # last notification delivered, then power-off if asked
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
        sup.terminated = True

    signal.signal(signal.SIGTERM, on_term)
    # caught, not ignored: an ignored SIGINT (a background start) would be inherited by the
    # run command, and Python then installs no KeyboardInterrupt for a stop to raise
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        sup.run()
    except Exception as e:  # the supervisor must leave a readable state behind
        import traceback

        agent_log(root, "supervisor {} crashed: {}\n{}".format(job_id, e, traceback.format_exc()))
        if sup.child and sup.child.poll() is None:
            sup.end_processes(10.0)
        sup.finish("failed", reason="agent error: {}".format(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Root(sys.argv[1]), sys.argv[2]))
