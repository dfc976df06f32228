"""A client killed at any point of a submit leaves no half job, and the next submit of the
project goes through (the killed one's sync lease expires)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import wait_state


def test_a_client_killed_mid_submit_leaves_every_job_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUJOB_SYNC_LEASE_TTL", "2")  # the local agent inherits the environment
    d = tmp_path / "proj"
    d.mkdir()
    for i in range(40):
        (d / f"f{i}.bin").write_bytes(os.urandom(100_000))
    (d / "job.yaml").write_text(json.dumps({"name": "killed", "run": "python w.py"}))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    rng = random.Random(7)
    for n in range(6):
        (d / "w.py").write_text(f"print('version {n}')\n")
        os.utime(d / "w.py", (1_700_000_000 + n, 1_700_000_000 + n))
        p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "submit", str(d / "job.yaml"), "--json"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        time.sleep(rng.uniform(0.3, 1.5))
        p.send_signal(signal.SIGKILL)
        p.wait()
    (d / "w.py").write_text("print('the final version')\n")
    os.utime(d / "w.py", (1_700_000_100, 1_700_000_100))
    r = subprocess.run([sys.executable, "-m", "gpujob.cli", "submit", str(d / "job.yaml"), "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    final = json.loads(r.stdout)["job_id"]
    jobs = tmp_path / "local-root" / "jobs"
    for jd in jobs.iterdir():  # every job folder is a whole job that ran its own version to the end
        st = wait_state("local", jd.name, ("succeeded", "failed"), 60)
        assert st["state"] == "succeeded", st
        version = (jd / "code" / "w.py").read_text()
        assert version.split("'")[1] in (jd / "output.log").read_text()
    assert "the final version" in (jobs / final / "output.log").read_text()
