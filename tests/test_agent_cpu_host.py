"""A host without nvidia-smi (a CPU host) over the real sshd, and the agent-log command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import remote_root, submit, wait_state, write_job


def test_cpu_host_without_nvidia_smi(ssh_host: str, tmp_path: Path) -> None:
    """No nvidia-smi: not an error for a job without gpus:, a clear refusal for one with, before
    submitting; ``gpus: auto`` runs on the CPU with a note. One rule on an SSH host and the laptop's ``local``."""
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    job = write_job(tmp_path, "cpu", "print('ok')", "python main.py")
    job_id = submit(ssh_host, job)["job_id"]
    assert wait_state(ssh_host, job_id, ("succeeded", "failed"))["state"] == "succeeded"
    assert not (remote_root(tmp_path, ssh_host) / "jobs" / job_id / "gpu.jsonl").exists()
    # a GPU job is refused before anything is sent (gpus: all on a CPU host is no GPU, not zero of them),
    # on the SSH host and on local alike
    for host, name in ((ssh_host, "box"), ("local", "local")):
        for gpus in (2, "all"):
            (tmp_path / f"g{gpus}{host}").mkdir()
            job = write_job(tmp_path / f"g{gpus}{host}", "gpu", "print('ok')", "python main.py", gpus=gpus)
            r = run_cli("submit", str(job), "--host", host)
            assert r.returncode == 2, r.stdout + r.stderr
            assert f"{name} is a CPU host (no nvidia-smi): the job cannot run there; nothing was submitted" in r.stderr
            assert "--wait-gpus" in r.stderr and "gpus: auto" in r.stderr and "Traceback" not in r.stderr
    assert [p.name for p in (remote_root(tmp_path, ssh_host) / "jobs").iterdir()] == [job_id]
    # gpus: auto (the bundled examples): the CPU here, with a note in the job's log, on both hosts
    for host in (ssh_host, "local"):
        (tmp_path / f"auto{host}").mkdir()
        job = write_job(tmp_path / f"auto{host}", "auto", "print('trained')", "python main.py", gpus="auto")
        auto_id = submit(host, job)["job_id"]
        assert wait_state(host, auto_id, ("succeeded", "failed"))["state"] == "succeeded"
        log = run_cli("tail", auto_id, "--host", host).stdout
        assert "gpus: auto runs the job on its CPU" in log and "trained" in log, log


def test_agent_log_command(tmp_path: Path) -> None:
    root = tmp_path / "local-root"
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.log").write_text("".join(f"2026-01-01 00:00:00 [1] line {i}\n" for i in range(100)))
    r = run_cli("agent-log", "local", "-n", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"2026-01-01 00:00:00 [1] line {i}" for i in (97, 98, 99)]
