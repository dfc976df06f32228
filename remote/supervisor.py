"""The supervisor (``python3 -m remote run JOB``): runs a job's attempts until it ends.

Started detached (its own session) by ``submit``, so it outlives the SSH connection.
It owns ``status.json`` (written atomically, with a heartbeat), ``events.jsonl`` and the
attempt markers in ``output.log``.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from remote import launch, procs
from remote.layout import JobDir, Root, agent_log, now

HEARTBEAT = float(os.environ.get("GPUJOB_HEARTBEAT", "5"))
# A login shell may reset PATH (Debian's /etc/profile does); the local host puts the
# laptop's own PATH (its venv) back in front.
PATH_PREFIX = 'if [ -n "${GPUJOB_PATH_PREFIX:-}" ]; then export PATH="$GPUJOB_PATH_PREFIX:$PATH"; fi\n'
TICK = 0.25


def _checkpoints():
    from remote import checkpoints

    return checkpoints


def latest_resume(ckpt_dir: Path) -> str:
    """The newest complete checkpoint, or '' (what GPUJOB_RESUME holds)."""
    try:
        found = _checkpoints().latest_complete(ckpt_dir)
    except ImportError:
        return ""
    return str(found) if found else ""


class Supervisor:
    """One job's life: attempts, restarts, stop requests, the final state."""

    def __init__(self, root: Root, job: JobDir) -> None:
        self.root, self.job = root, job
        self.spec: Dict[str, Any] = job.spec_data()
        self.status: Dict[str, Any] = job.status()
        self.child: Optional[subprocess.Popen] = None
        self.last_beat = 0.0
        self.stop_reason: Optional[str] = None
        self.terminated = False
        self.watchers: List[Any] = []  # objects with tick(sup) -> Optional[reason to stop]

    # ---- status -------------------------------------------------------------------------
    def save(self, **changes: Any) -> None:
        self.status.update(changes)
        self.status["heartbeat"] = now()
        self.job.write_status(self.status)
        self.last_beat = time.time()

    def set_state(self, state: str, **changes: Any) -> None:
        old = self.status.get("state")
        self.save(state=state, **changes)
        if old != state:
            self.job.event("state", state=state, **{k: v for k, v in changes.items() if k in ("reason", "exit_code", "attempt")})

    def log_marker(self, text: str) -> None:
        with open(str(self.job.log), "a") as f:
            f.write("==> gpujob: {} [{}]\n".format(text, time.strftime("%Y-%m-%d %H:%M:%S")))

    # ---- one attempt --------------------------------------------------------------------
    def env(self, attempt: int, resume: str) -> Dict[str, str]:
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("GPUJOB_") or k == "PYTHONPATH":
                env.pop(k)
        job = self.job
        runtime = Path(__file__).resolve().parent.parent / "runtime"
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
            "GPUJOB_DATA_DIR": str(self.root.data),
            "PYTHONPATH": str(runtime) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
            "PYTHONUNBUFFERED": "1",
        })
        env.setdefault("HF_HOME", str(self.root.root / "cache" / "huggingface"))
        if self.status.get("cuda_visible_devices") is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.status["cuda_visible_devices"]
        env.update(launch.node_env(self.spec))
        env.update(self.spec.get("host_env") or {})
        env.update(self.spec.get("env") or {})
        env.update(self.job.secrets_data())
        return env

    def ckpt_dir(self) -> Path:
        """``<job>/ckpt``, or ``<checkpoint.dir>/<job id>`` on shared storage (multi-node)."""
        shared = self.spec.get("checkpoint_dir")
        return Path(os.path.expanduser(shared)) / self.job.id if shared else self.job.ckpt

    def start_attempt(self, attempt: int) -> None:
        resume = latest_resume(self.ckpt_dir())
        self.log_marker("attempt {} started{}".format(attempt, " (resume from {})".format(resume) if resume else ""))
        log = open(str(self.job.log), "ab")
        try:
            self.child = subprocess.Popen(
                ["bash", "-lc", PATH_PREFIX + launch.command(self.spec)], cwd=str(self.job.code), env=self.env(attempt, resume),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        finally:
            log.close()
        attempts = self.status.setdefault("attempts", [])
        attempts.append({"n": attempt, "started_at": now(), "resume": resume, "pid": self.child.pid})
        self.set_state("running", attempt=attempt, child_pid=self.child.pid, started_at=self.status.get("started_at") or now())

    def stop_requested(self) -> Optional[str]:
        if self.terminated:
            return "agent terminated"
        try:
            text = self.job.stop_file.read_text().strip()
        except OSError:
            return None
        return text or "stop requested"

    def stop_child(self, reason: str) -> None:
        """Ask politely through the stop file, then SIGTERM the whole tree, then SIGKILL."""
        self.stop_reason = reason
        self.save(stopping=reason)
        if not self.job.stop_file.exists():
            self.job.stop_file.write_text(reason + "\n")
        grace = float(self.spec.get("stop_grace", 120))
        assert self.child is not None
        watching = Path(str(self.job.stop_file) + ".watch").exists()
        if watching:  # the runtime helper polls the stop file: give it the grace to save
            deadline = time.time() + grace
            while time.time() < deadline and self.child.poll() is None:
                self.heartbeat()
                time.sleep(TICK)
            grace = 10.0
        killed = procs.kill_tree(self.job.id, self.child.pid, grace, poll=self.heartbeat)
        if killed:
            self.job.event("killed", pids=killed)
        self.child.wait()

    def heartbeat(self) -> None:
        if time.time() - self.last_beat >= HEARTBEAT:
            self.save()

    def wait_attempt(self) -> int:
        assert self.child is not None
        while True:
            rc = self.child.poll()
            if rc is not None:
                # the main process ended: no straggler of this attempt may survive it
                procs.kill_tree(self.job.id, None, 5.0)
                return rc
            reason = self.stop_requested()
            for w in self.watchers:
                reason = reason or w.tick(self)
            if reason:
                self.stop_child(reason)
                return self.child.returncode
            self.heartbeat()
            time.sleep(TICK)

    # ---- the job ------------------------------------------------------------------------
    def should_retry(self, attempt: int, rc: int, cause: str) -> bool:
        retry = self.spec.get("retry") or {}
        if attempt > int(retry.get("max_restarts", 0)):
            return False
        on = retry.get("on") or ["error", "oom"]
        return cause in on or (cause not in ("oom", "nan", "nccl", "signal") and "error" in on)

    def classify(self, rc: int) -> str:
        from remote import diagnose

        return diagnose.diagnose(self.job.log, rc)["cause"]

    def run(self) -> str:
        self.save(supervisor_pid=os.getpid(), boot_id=procs.boot_id(), agent=str(Path(__file__).parent.parent.name))
        attempt = int(self.status.get("attempt") or 0)
        while True:
            if self.stop_requested():
                return self.finish("stopped", reason=self.stop_requested(), exit_code=None)
            attempt += 1
            try:
                self.start_attempt(attempt)
            except OSError as e:
                self.log_marker("could not start the run command: {}".format(e))
                return self.finish("failed", reason="could not start: {}".format(e), exit_code=None)
            rc = self.wait_attempt()
            record = self.status["attempts"][-1]
            record.update(ended_at=now(), exit_code=rc)
            self.log_marker("attempt {} ended with exit code {}".format(attempt, rc))
            if self.stop_reason:
                record["reason"] = self.stop_reason
                state = "autostopped" if self.stop_reason.startswith("autostop") else "stopped"
                return self.finish(state, reason=self.stop_reason, exit_code=rc)
            if rc == 0:
                return self.finish("succeeded", exit_code=0)
            cause = self.classify(rc)
            record["reason"] = cause
            if not self.should_retry(attempt, rc, cause):
                return self.finish("failed", reason=cause, exit_code=rc)
            retry = self.spec.get("retry") or {}
            if cause == "oom" and retry.get("on_oom") == "halve_batch":
                self.status["batch_divisor"] = int(self.status.get("batch_divisor", 1)) * 2
            backoff = float(retry.get("backoff", 10)) * (2 ** max(0, attempt - 1 - int(self.status.get("restart_base", 0))))
            self.set_state("restarting", reason=cause, exit_code=rc, next_attempt_at=now() + backoff)
            self.job.event("restart", attempt=attempt + 1, cause=cause, exit_code=rc)
            deadline = time.time() + min(backoff, 3600)
            while time.time() < deadline and not self.stop_requested():
                self.heartbeat()
                time.sleep(TICK)

    def finish(self, state: str, **changes: Any) -> str:
        self.set_state(state, ended_at=now(), child_pid=None, **changes)
        self.job.event("finished", state=state)
        return state


def main(root: Root, job_id: str) -> int:
    job = root.job(job_id)
    sup = Supervisor(root, job)

    def on_term(signum: int, frame: Any) -> None:
        sup.terminated = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        sup.run()
    except Exception as e:  # the supervisor must leave a readable state behind
        import traceback

        agent_log(root, "supervisor {} crashed: {}\n{}".format(job_id, e, traceback.format_exc()))
        if sup.child and sup.child.poll() is None:
            procs.kill_tree(job_id, sup.child.pid, 10.0)
        sup.finish("failed", reason="agent error: {}".format(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Root(sys.argv[1]), sys.argv[2]))
