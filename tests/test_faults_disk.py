"""The instance's disk fills up while a submit's code arrives (the project's code folder on a
small tmpfs of its own): the submit says the disk is full and how to free it (it used to say
"agent error in sync: [Errno 28] ..., run submit again", which cannot help), and once there is
room the next submit runs exactly the code sent."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.faults.test_full_disk import tmpfs
from tests.helpers import remote_root, wait_state, write_job


@pytest.fixture
def small_code_disk(tmp_path: Path) -> Iterator[Path]:
    """``<root>/projects/full/code`` on a 12 MB tmpfs."""
    with tmpfs(remote_root(tmp_path, "local") / "projects" / "full" / "code", "12m") as code:
        yield code


def test_a_disk_that_fills_during_sync_is_named_and_the_next_submit_is_whole(small_code_disk: Path,
                                                                               tmp_path: Path) -> None:
    job = write_job(tmp_path, "full", "print(open('data.bin', 'rb').read()[:4].hex(), flush=True)", "python main.py")
    data = os.urandom(16 << 20)
    (job.parent / "data.bin").write_bytes(data)
    r = run_cli("submit", str(job), "--host", "local")
    assert r.returncode != 0
    assert "is full" in r.stderr and "free space" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "agent error" not in r.stderr, r.stderr
    jobs = remote_root(tmp_path, "local") / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir())  # no job of code that did not all arrive
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_code_disk)], check=True)
    r = run_cli("submit", str(job), "--host", "local", "--json")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    wait_state("local", job_id, ("succeeded",), 60, remote_root(tmp_path, "local"))
    jd = remote_root(tmp_path, "local") / "jobs" / job_id
    assert (jd / "code" / "data.bin").read_bytes() == data
    assert data[:4].hex() in (jd / "output.log").read_text()
    assert not [p.name for p in small_code_disk.iterdir() if p.name.startswith(".gpujob-")]
