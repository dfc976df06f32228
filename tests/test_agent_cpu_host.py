"""A host without nvidia-smi (a CPU host) over the real sshd, and the agent-log command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import remote_root, submit, wait_state, write_job


def test_cpu_host_without_nvidia_smi(ssh_host: str, tmp_path: Path) -> None:
    """No nvidia-smi: not an error for a job without gpus:, a clear refusal for one with, before
    submitting (on a rented host; the laptop's ``local`` host runs a GPU job on its CPU instead)."""
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    job = write_job(tmp_path, "cpu", "print('ok')", "python main.py")
    job_id = submit(ssh_host, job)["job_id"]
    assert wait_state(ssh_host, job_id, ("succeeded", "failed"))["state"] == "succeeded"
    assert not (remote_root(tmp_path, ssh_host) / "jobs" / job_id / "gpu.jsonl").exists()
    # a GPU job is refused before anything is sent (gpus: all on a CPU host is no GPU, not zero of them),
    # as the same file with --host box,local is
    for gpus in (2, "all"):
        (tmp_path / f"g{gpus}").mkdir()
        job = write_job(tmp_path / f"g{gpus}", "gpu", "print('ok')", "python main.py", gpus=gpus)
        r = run_cli("submit", str(job), "--host", ssh_host)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "box a CPU host (no nvidia-smi): the job cannot run there; nothing was submitted" in r.stderr, r.stderr
        assert "--wait-gpus" in r.stderr and "lower gpus:" in r.stderr and "Traceback" not in r.stderr
    assert [p.name for p in (remote_root(tmp_path, ssh_host) / "jobs").iterdir()] == [job_id]


def test_agent_log_command(tmp_path: Path) -> None:
    root = tmp_path / "local-root"
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.log").write_text("".join(f"2026-01-01 00:00:00 [1] line {i}\n" for i in range(100)))
    r = run_cli("agent-log", "local", "-n", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"2026-01-01 00:00:00 [1] line {i}" for i in (97, 98, 99)]
