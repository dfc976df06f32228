"""A host without nvidia-smi (a CPU host) over the real sshd, and the agent-log command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import remote_root, submit, wait_state, write_job


def test_cpu_host_without_nvidia_smi(ssh_host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No nvidia-smi: not an error for a job without gpus:, a clear failure for one with
    (on a rented host; the laptop's ``local`` host runs a GPU job on its CPU instead)."""
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    job = write_job(tmp_path, "cpu", "print('ok')", "python main.py")
    job_id = submit(ssh_host, job)["job_id"]
    assert wait_state(ssh_host, job_id, ("succeeded", "failed"))["state"] == "succeeded"
    assert not (remote_root(tmp_path, ssh_host) / "jobs" / job_id / "gpu.jsonl").exists()
    (tmp_path / "g").mkdir()
    job = write_job(tmp_path / "g", "gpu", "print('ok')", "python main.py", gpus=2)
    st = wait_state(ssh_host, submit(ssh_host, job)["job_id"], ("succeeded", "failed"))
    assert st["state"] == "failed" and "no nvidia-smi" in st["reason"]
    monkeypatch.setenv("COLUMNS", "250")
    human = run_cli("status", st["job_id"], "--host", ssh_host).stdout
    assert "no nvidia-smi" in human and "or lower gpus:" in human  # cause and remedy


def test_agent_log_command(tmp_path: Path) -> None:
    root = tmp_path / "local-root"
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.log").write_text("".join(f"2026-01-01 00:00:00 [1] line {i}\n" for i in range(100)))
    r = run_cli("agent-log", "local", "-n", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"2026-01-01 00:00:00 [1] line {i}" for i in (97, 98, 99)]
