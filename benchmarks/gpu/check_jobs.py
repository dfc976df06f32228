"""Processes and gpujob jobs for the GPU check: commands killed with their whole group at a
deadline, and the gpujob CLI on ``local`` under a temporary root (never the user's ~/.gpujob)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TERMINAL = ("succeeded", "failed", "stopped", "autostopped", "lost")


class StepFailed(Exception):
    """A step's check did not hold; the message says what was seen."""


def run_cmd(cmd: list[str], env: dict[str, str], timeout: float, cwd: Path | None = None) -> tuple[int, str]:
    """(exit status, stdout+stderr); the command and everything it started die at ``timeout``
    (and when the step's own guard interrupts the wait)."""
    proc = subprocess.Popen(cmd, env=env, cwd=str(cwd) if cwd else None, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        out, _ = proc.communicate()
        text = out.decode("utf-8", "replace")
        raise StepFailed(f"{Path(cmd[1] if cmd[0] == sys.executable else cmd[0]).name} ran over {timeout:.0f} s; "
                         f"last output: {text[-600:]}") from None
    except BaseException:
        kill_group(proc.pid)
        proc.wait()
        raise
    return proc.returncode, out.decode("utf-8", "replace")


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


@dataclass
class Gpujob:
    """The gpujob CLI of this checkout on the ``local`` host, rooted in ``tmp``."""

    python: str
    tmp: Path
    path_prefix: str = ""  # a folder put first on PATH (the nvidia-smi stand-in in the dry run)
    extra_env: dict[str, str] = field(default_factory=dict)
    submitted: list[dict] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOB_")}
        env.update(GPUJOB_CONFIG_DIR=str(self.tmp / "config"), GPUJOB_LOCAL_ROOT=str(self.tmp / "root"),
                   GPUJOB_MUX="0", PYTHONPATH=str(REPO), **self.extra_env)
        if self.path_prefix:
            env["PATH"] = self.path_prefix + os.pathsep + env.get("PATH", "")
        return env

    @property
    def root(self) -> Path:
        return self.tmp / "root"

    def cli(self, *args: str, timeout: float = 120) -> dict:
        rc, out = run_cmd([self.python, "-m", "gpujob.cli", *args, "--json"], self.env(), timeout)
        if rc != 0:
            raise StepFailed(f"gpujob {' '.join(args)} exited {rc}: {out[-800:]}")
        try:
            return json.loads(out)
        except ValueError:
            raise StepFailed(f"gpujob {' '.join(args)} printed no JSON: {out[-800:]}") from None

    def submit(self, name: str, script: Path, args: list[str], **spec: object) -> dict:
        """Write a project with ``script`` as train.py and submit it; returns submit's JSON."""
        proj = self.tmp / "projects" / name
        proj.mkdir(parents=True, exist_ok=True)
        (proj / "train.py").write_text(script.read_text())
        run = " ".join(shlex.quote(x) for x in [self.python, "train.py", *args])
        (proj / "job.yaml").write_text(json.dumps({"name": name, "run": run, **spec}, indent=1))  # JSON is YAML
        res = self.cli("submit", str(proj / "job.yaml"), "--host", "local")
        self.submitted.append(res)
        return res

    def status(self, job_id: str) -> dict:
        return self.cli("status", job_id, "--host", "local", timeout=60)

    def wait(self, job_id: str, states: tuple[str, ...], timeout: float) -> dict:
        deadline = time.time() + timeout
        st: dict = {}
        while time.time() < deadline:
            st = self.status(job_id)
            if st.get("state") in states:
                return st
            time.sleep(0.5)
        why = f": {st['queue_reason']}" if st.get("queue_reason") else ""
        raise StepFailed(f"job {job_id} stayed {st.get('state')!r} for {timeout:.0f} s (wanted {'/'.join(states)}){why}")

    def job_dir(self, job_id: str) -> Path:
        return self.root / "jobs" / job_id

    def cleanup(self, polite: bool = True) -> list[int]:
        """Stop every job still running (``polite``: through gpujob, so it may checkpoint), then kill
        any process left under the temporary root."""
        for res in self.submitted if polite else []:
            try:
                if self.status(res["job_id"]).get("state") not in TERMINAL:
                    self.cli("stop", res["job_id"], "--host", "local", timeout=60)
            except (StepFailed, KeyError):
                pass
        return kill_processes_mentioning(str(self.tmp))


def kill_processes_mentioning(text: str) -> list[int]:
    """SIGKILL this user's processes whose environment or command line names ``text`` (our temp root)."""
    token = text.encode()
    killed = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if token in (d / "environ").read_bytes() or token in (d / "cmdline").read_bytes():
                os.kill(int(d.name), signal.SIGKILL)
                killed.append(int(d.name))
        except OSError:
            continue
    return killed
