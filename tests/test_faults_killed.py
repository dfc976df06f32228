"""The supervisor killed (-9) while its job trains: the trainer it leaves behind is found, the
job reads ``lost`` at once (not after the heartbeat ages), and ``resume`` ends the orphan
before it starts the next attempt: one supervisor, one trainer, never two."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.conftest import run_cli
from tests.faults.test_concurrency import LONG_JOB, end_job, supervisors
from tests.helpers import job_processes, remote_root, status, submit, wait_for, write_job


def trainers(job_id: str) -> list[int]:
    out = []
    for p in job_processes(job_id):
        try:
            if b"main.py" in Path(f"/proc/{p}/cmdline").read_bytes():
                out.append(p)
        except OSError:
            pass
    return out


def test_a_killed_supervisor_leaves_one_trainer_after_resume(any_host: str, tmp_path: Path) -> None:
    job_id = submit(any_host, write_job(tmp_path, "orphan", LONG_JOB, "python main.py"))["job_id"]
    log = remote_root(tmp_path, any_host) / "jobs" / job_id / "output.log"
    wait_for(lambda: log.exists() and "attempt 1 ready" in log.read_text(), 60, "the first attempt")
    first = trainers(job_id)
    assert len(first) == 1
    try:
        os.kill(status(any_host, job_id)["supervisor_pid"], signal.SIGKILL)
        wait_for(lambda: not supervisors(job_id), 10, "the supervisor to die")
        st = status(any_host, job_id)
        assert st["state"] == "lost" and "still run" in st["lost_reason"], st
        r = run_cli("resume", job_id, "--host", any_host)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: "attempt 2 ready" in log.read_text(), 60, "the resumed attempt")
        assert len(supervisors(job_id)) == 1
        assert trainers(job_id) and first[0] not in trainers(job_id), (first, trainers(job_id))
        assert len(trainers(job_id)) == 1
    finally:
        end_job(job_id)
