"""Run by test_leftovers.py as a pytest session of its own: a test that starts a job and fails."""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers import submit, wait_for, write_job


def test_fails_with_its_job_running(tmp_path: Path) -> None:
    job_id = submit("local", write_job(tmp_path, "left", "import time; print('up', flush=True); time.sleep(600)",
                                       "python main.py"))["job_id"]
    log = tmp_path / "local-root" / "jobs" / job_id / "output.log"
    wait_for(lambda: log.exists() and "up" in log.read_text(), 60, "the job")
    Path(os.environ["GJ_REPORT"]).write_text(str(tmp_path))
    raise AssertionError("this test fails on purpose, its job still running")
