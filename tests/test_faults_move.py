"""Two ``gpujob move`` of one job to the same host at once (a person and ``gpujob guard``, or
two terminals): one moves it, the other is refused; the job that arrived is never deleted under
its running supervisor by the second arrival."""

from __future__ import annotations

import json
from pathlib import Path

from tests.faults.test_concurrency import LONG_JOB, cli, end_job, supervisors
from tests.helpers import remote_root, submit, wait_for, write_job
from tests.test_faults_killed import trainers


def test_two_moves_at_once_leave_one_running_job(ssh_host: str, tmp_path: Path) -> None:
    job_id = submit("local", write_job(tmp_path, "mv2", LONG_JOB, "python main.py", stop={"grace": 5}))["job_id"]
    log = remote_root(tmp_path, "local") / "jobs" / job_id / "output.log"
    wait_for(lambda: log.exists() and "attempt 1 ready" in log.read_text(), 60, "the first attempt")
    try:
        procs = [cli("move", job_id, "--to", ssh_host, "--json") for _ in range(2)]
        results = [(p.wait(180), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
        ok = [r for r in results if r[0] == 0]
        assert len(ok) == 1, results  # the project's sync lease lines the two adopts up
        refused = [r for r in results if r[0] != 0][0]
        said = refused[1] + refused[2]
        assert refused[0] == 2 and "Traceback" not in said, refused
        assert "already exists on this host" in said or "moved to" in said, refused
        new = remote_root(tmp_path, ssh_host) / "jobs" / job_id
        wait_for(lambda: (new / "output.log").exists() and "ready" in (new / "output.log").read_text(), 60,
                 "the job on the new host")
        st = json.loads((new / "status.json").read_text())
        assert st["state"] == "running", (st, results)
        assert len(supervisors(job_id)) == 1, results
        assert len(trainers(job_id)) == 1, results
        assert (new / "code" / "main.py").exists()
    finally:
        end_job(job_id)
