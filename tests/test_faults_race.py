"""Two ``stop`` of one running job at once, with a ``resume`` racing them: both stops answer
``stopped`` (exit 0, no traceback), the resume is either refused ("already running") or
restarts the job afterwards, and the end is consistent: a stopped job has no process left, a
resumed one has one supervisor and one trainer."""

from __future__ import annotations

import json
from pathlib import Path

from tests.faults.test_concurrency import LONG_JOB, cli, end_job, supervisors
from tests.helpers import job_processes, remote_root, status, submit, wait_for, write_job
from tests.test_faults_killed import trainers


def test_two_stops_and_a_resume_at_once_end_consistently(tmp_path: Path) -> None:
    job_id = submit("local", write_job(tmp_path, "race", LONG_JOB, "python main.py"))["job_id"]
    log = remote_root(tmp_path, "local") / "jobs" / job_id / "output.log"
    wait_for(lambda: log.exists() and "attempt 1 ready" in log.read_text(), 60, "the first attempt")
    try:
        procs = [cli("stop", job_id, "--host", "local", "--json") for _ in range(2)] + [cli("resume", job_id, "--host", "local")]
        results = [(p.wait(120), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
        for rc, out, err in results[:2]:
            assert rc == 0 and json.loads(out)["state"] == "stopped", (rc, out, err)
        rc, out, err = results[2]
        assert "Traceback" not in err
        assert rc == 0 or "already running" in err, (rc, out, err)
        if rc == 0:  # it came after a stop had ended the job: the job runs again, once
            wait_for(lambda: "attempt 2 ready" in log.read_text(), 60, "the resumed attempt")
            assert status("local", job_id)["state"] == "running"
            assert len(supervisors(job_id)) == 1
            assert len(trainers(job_id)) == 1
        else:
            assert status("local", job_id)["state"] == "stopped"
            wait_for(lambda: not job_processes(job_id) and not supervisors(job_id), 20, "no process of the job")
    finally:
        end_job(job_id)
