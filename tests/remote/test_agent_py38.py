"""The instance side promises Python 3.8+ (remote/ is stdlib-only 3.8): its main verbs, run by an
agent whose interpreter is a real 3.8, over the real sshd. Skipped, with the reason, where no 3.8 is."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import status, submit, wait_for, wait_state, write_job


def python38() -> str | None:
    """A Python 3.8 interpreter's real path: pyenv's versions first, then python3.8 on PATH."""
    cands = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    cands += [p for p in [shutil.which("python3.8")] if p]
    for c in cands:
        try:
            r = subprocess.run([c, "-c", "import sys; print(sys.version_info[:2] == (3, 8), sys.executable)"],
                               capture_output=True, text=True, timeout=30, env=dict(os.environ, PYENV_REHASH_TIMEOUT="1"))
        except (OSError, subprocess.SubprocessError):
            continue
        ok, _, exe = r.stdout.strip().partition(" ")
        if r.returncode == 0 and ok == "True":
            return exe
    return None


JOB = """
    import os, pathlib, signal, sys, time
    ck = pathlib.Path(os.environ["GPUJOB_CKPT_DIR"]) / "step-1"
    ck.mkdir()
    (ck / "weights.bin").write_bytes(b"w" * 1000)
    (ck / ".gpujob-complete").write_text("")

    def leave(*_):
        print("stopping cleanly", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, leave)  # the supervisor's stop: SIGTERM, then the grace
    i = 0
    while True:
        print("tick", i, flush=True)
        i += 1
        time.sleep(0.1)
"""


@pytest.fixture
def py38() -> str:
    """The 3.8 interpreter, or a skip that says why (``pytest -rs`` lists it); before the sshd starts."""
    py = python38()
    if py is None:
        pytest.skip("no Python 3.8 here (~/.pyenv/versions/3.8*, python3.8 on PATH): the agent's 3.8 promise "
                    "goes untested; install one (pyenv install 3.8) to run this test")
    return py


def test_agent_verbs_run_under_python_38(py38: str, ssh_host: str, tmp_path: Path) -> None:
    """submit (install, sync, the supervisor), tail, status, ls, stop and pull with a 3.8 agent."""
    from gpujob.config.hosts import HostStore

    py = py38
    store = HostStore()
    host = store.get(ssh_host)
    host.agent_python = py
    store.save(host)

    job_id = submit(ssh_host, write_job(tmp_path, "old", JOB, "python main.py", stop={"grace": "10s"}))["job_id"]
    root = tmp_path / "remote-root"
    agents = list((root / "agent").glob("*/python"))
    assert [p.read_text().strip() for p in agents] == [py]  # every verb below runs with it
    jd = root / "jobs" / job_id
    wait_state(ssh_host, job_id, ("running",), 60)
    sup = json.loads((jd / "status.json").read_text())["supervisor_pid"]
    assert os.path.realpath(f"/proc/{sup}/exe") == os.path.realpath(py)  # the supervisor too

    wait_for(lambda: "\ntick " in run_cli("tail", job_id, "--host", ssh_host, "-n", "3").stdout, 30, "ticks in tail")
    st = status(ssh_host, job_id)
    assert st["state"] == "running" and [c["name"] for c in st["checkpoints"] if c["complete"]] == ["step-1"]
    ls = run_cli("ls", "--host", ssh_host, "--json")
    assert ls.returncode == 0, ls.stderr
    assert job_id in [j["job_id"] for j in json.loads(ls.stdout)["jobs"]]

    r = run_cli("stop", job_id, "--host", ssh_host, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["state"] == "stopped"
    assert "stopping cleanly" in run_cli("tail", job_id, "--host", ssh_host, "-n", "4").stdout  # the stop, how it ended, the attempt's end

    r = run_cli("pull", job_id, str(tmp_path / "got"), "--host", ssh_host, "--json")
    assert r.returncode == 0, r.stderr
    assert (Path(json.loads(r.stdout)["dest"]) / "ckpt" / "step-1" / "weights.bin").read_bytes() == b"w" * 1000
    log = (root / "agent.log").read_text() if (root / "agent.log").exists() else ""
    assert "Traceback" not in log, log[-3000:]
