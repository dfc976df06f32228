"""``pull --follow`` waits out links, not missing jobs: a job that does not exist, or is removed from
another terminal while followed, ends the follow as a plain pull ends (exit 2, "no job matches")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, run_cli
from tests.helpers import wait_for, wait_state, write_job

SLEEPER = "import time\nfor i in range(600):\n    print('step', i, flush=True)\n    time.sleep(0.5)\n"


def test_follow_of_a_job_that_does_not_exist_ends_at_once(tmp_path: Path) -> None:
    r = run_cli("pull", "nosuchjob", str(tmp_path / "p"), "--host", "local", "--follow", "0.2", timeout=60)
    assert r.returncode == 2 and "no job matches 'nosuchjob'" in r.stderr, r.stderr
    assert "trying again" not in r.stderr and "Traceback" not in r.stderr


def test_follow_of_a_job_removed_meanwhile_ends(tmp_path: Path) -> None:
    job = write_job(tmp_path, "followed-gone", SLEEPER, "python main.py")
    r = run_cli("submit", str(job), "--host", "local", "--json")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    wait_state("local", job_id, ("running",), timeout=60)
    out, err = tmp_path / "follow.out", tmp_path / "follow.err"
    with open(out, "w") as of, open(err, "w") as ef:
        p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "pull", job_id, str(tmp_path / "p"), "--host", "local",
                              "--follow", "0.2"], stdout=of, stderr=ef, stdin=subprocess.DEVNULL,
                             env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:  # following: it has looked at the job (its notes are on stdout)
        wait_for(lambda: "no complete checkpoint yet" in out.read_text(), 60, lambda: out.read_text() + err.read_text())
        # another terminal removes it while the follower is held (SIGSTOP): rm --force stops the job before it
        # removes it, and a follower that looked between the two saw a stopped job end, as it should
        os.kill(p.pid, signal.SIGSTOP)
        try:
            r = run_cli("rm", job_id, "--force", "--host", "local")
        finally:
            os.kill(p.pid, signal.SIGCONT)
        assert r.returncode == 0, r.stderr
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    said = out.read_text() + err.read_text()
    assert rc == 2 and f"no job matches {job_id!r}" in said, said
    assert "trying again" not in said and "Traceback" not in said
