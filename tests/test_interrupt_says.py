"""Ctrl-C says what state things are in: during a submit's upload, nothing was submitted and the
next submit resumes; the exit is 130 and stderr is one clear line, never empty."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, run_cli
from tests.helpers import wait_for, write_job


def test_ctrl_c_in_submits_upload_says_nothing_was_submitted(tmp_path: Path, ssh_host: str) -> None:
    job = write_job(tmp_path, "upl", "print('hi')", "python main.py")
    with open(job.parent / "weights.bin", "wb") as f:
        f.write(os.urandom(192 << 20))
    projects = tmp_path / "remote-root" / "projects"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "submit", str(job), "--host", ssh_host],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
    try:
        def uploading() -> bool:  # the large file's part (or ranged sidecar) is there: the upload is under way
            return projects.is_dir() and any(".part" in q.name or q.name.startswith(".gpujob")
                                             for q in projects.rglob("*"))
        wait_for(uploading, 60, "the upload to start", interval=0.01)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130, out + err
    assert "interrupted during the upload to box: nothing was submitted" in err, err
    assert "the next gpujob submit resumes the upload" in err and "Traceback" not in err, err
    r = run_cli("ls", "--host", ssh_host, "--json")
    assert r.returncode == 0 and '"jobs": []' in r.stdout, r.stdout
