"""What the end-to-end tests share: write a job, submit it, wait on its state or on any condition.

Every wait has a deadline and, when it runs out, says what it saw (the job's last status and the
tail of its log), so a failing run explains itself.
"""

from __future__ import annotations

import importlib.util
import json
import os
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

EXAMPLE = REPO / "examples" / "tiny" / "job.yaml"
# every state a job can end in (remote/core/layout.py TERMINAL)
ENDED = ("succeeded", "failed", "stopped", "autostopped", "lost", "moved")


# the extra of pyproject.toml that brings each optional package the tests use
EXTRAS = {"torch": "train", "transformers": "train", "lightning": "train", "datasets": "train", "accelerate": "train",
          "tqdm": "train", "jsonargparse": "train", "tensorboard": "dev", "matplotlib": "dev", "build": "dev", "hatchling": "dev",
          "hypothesis": "dev", "optuna": "sweep"}


def needs(*modules: str) -> None:
    """Skip the calling test (or, at module level, the file) when an optional package is missing,
    saying which and how to get it (``pytest -rs`` lists the reasons). Like ``pytest.importorskip``
    but without importing: torch or transformers cost seconds per process."""
    for m in modules:
        if importlib.util.find_spec(m) is None:
            test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]  # -rs shows this line, not the test
            pytest.skip(f"{test + ' ' if test else ''}needs {m}: pip install -e '.[{EXTRAS.get(m, 'dev')}]'",
                        allow_module_level=True)


def write_job(tmp_path: Path, name: str, script: str, run: str, **extra: object) -> Path:
    """A project ``tmp_path/name`` with ``main.py`` (``script``, dedented) and a job.yaml."""
    d = tmp_path / name
    d.mkdir()
    (d / "main.py").write_text(textwrap.dedent(script))
    spec = {"name": name, "run": run, **extra}
    (d / "job.yaml").write_text(json.dumps(spec))  # JSON is YAML
    return d / "job.yaml"


def submit(host: str, job: Path | str = EXAMPLE, *extra: str) -> dict:
    """``gpujob submit JOB --host HOST --json EXTRA``; its JSON answer (``["job_id"]`` is the id)."""
    r = run_cli("submit", str(job), "--host", host, "--json", *extra)
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


def status(host: str, job_id: str) -> dict:
    r = run_cli("status", job_id, "--host", host, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def remote_root(tmp_path: Path, host: str) -> Path:
    """The gpujob root the test's host uses on this machine (the ``isolated`` and ``ssh_host`` fixtures)."""
    return tmp_path / ("remote-root" if host != "local" else "local-root")


def wait_for(pred: Callable[[], object], timeout: float = 60, what: str | Callable[[], str] = "",
             interval: float = 0.2) -> bool:
    """Poll ``pred`` until it is true (returns True); past ``timeout`` seconds, fail naming ``what``
    (a callable is asked then: e.g. a log's text)."""
    deadline = time.monotonic() + timeout
    while True:
        asked = time.monotonic()
        if pred():
            return True
        now = time.monotonic()
        if now >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:g} s waiting for {said or getattr(pred, '__name__', pred)}")
        # a question that starts a process (a CLI call: a third of a second of CPU) is asked at most
        # half the time: polled back to back it would take a core the job under test needs
        time.sleep(max(interval, min(now - asked, 2.0)))


def _log_tail(host: str, job_id: str, n: int = 20) -> str:
    r = run_cli("tail", job_id, "--host", host, "-n", str(n), timeout=30)
    return r.stdout if r.returncode == 0 else f"(tail failed: {r.stderr.strip()})"


def _profile_root(host: str) -> Path | None:
    """The root of ``host``'s profile as a folder of this machine (the tests' hosts all keep theirs
    here), or None when the profile cannot say."""
    try:
        from gpujob.config.hosts import HostStore

        root = Path(HostStore().get(host, checked=False).remote_root)
    except Exception:  # noqa: BLE001 - no profile, a list of hosts: the polls ask the CLI
        return None
    return root if root.is_absolute() else None


def _one_node_job_here(root: Path, job_id: str) -> bool:
    """The job's own status.json is under ``root`` and says it all (a job of several nodes has a
    state the laptop draws from every node's)."""
    try:
        spec = json.loads((root / "jobs" / job_id / "spec.json").read_text())
    except (OSError, ValueError):
        return False
    return int((spec.get("node") or {}).get("num_nodes", 1)) <= 1 and (root / "jobs" / job_id / "status.json").is_file()


def wait_state(host: str, job_id: str, states: tuple[str, ...], timeout: float = 90, root: Path | None = None) -> dict:
    """Poll until the job is in one of ``states``; its ``gpujob status --json`` then.

    The polls read status.json under ``root`` (the host's root on this machine; default: the
    profile's, when the job's status.json is there) instead of starting a CLI process each: each
    costs a third of a second of CPU the job under test needs on 2 shared cores. The answer still
    comes from ``gpujob status``, and a state only a reader concludes (lost) is always asked of it.
    """
    deadline = time.monotonic() + timeout
    st: dict = {}
    inferred = root is None
    if inferred:
        root = _profile_root(host)
    while time.monotonic() < deadline:
        if root is not None and not (inferred and not _one_node_job_here(root, job_id)):
            try:
                cheap = json.loads((root / "jobs" / job_id / "status.json").read_text()).get("state")
            except (OSError, ValueError):
                cheap = None
            if cheap not in states and "lost" not in states:  # lost is a reader's conclusion
                time.sleep(0.2)
                continue
        st = status(host, job_id)
        if st["state"] in states:
            return st
        time.sleep(0.5)
    st = st or status(host, job_id)
    brief = {k: st.get(k) for k in ("state", "reason", "exit_code", "attempt", "queue_position", "last_line")}
    raise AssertionError(f"{job_id} on {host} stayed {st.get('state')!r} for {timeout:g} s, wanted {states}\n"
                         f"last status: {brief}\nlog tail:\n{_log_tail(host, job_id)}")


def job_processes(job_id: str) -> list[int]:
    """Processes of a job, by ``GPUJOB_JOB_ID`` in their environment."""
    token = f"GPUJOB_JOB_ID={job_id}\0".encode()
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if token in (d / "environ").read_bytes():
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def processes_with(*words: bytes) -> list[int]:
    """Pids whose argv holds every one of ``words`` as a whole argument."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if all(w in argv for w in words):
                out.append(int(d.name))
    return out
