"""GPUs (an nvidia-smi stand-in on the host's PATH): samples in gpu.jsonl, free GPUs and
the per-host FIFO queue; cost and its projection; CPU hosts; the agent log command.

A host without nvidia-smi (a CPU host) over the real sshd, and the agent-log command."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import job_processes, remote_root, status, submit, wait_for, wait_state, write_job

SMI = """#!/bin/sh
# nvidia-smi stand-in: prints the figures the test wrote (index, util, mem used, mem total, power, temp)
cat "$(dirname "$0")/figures.csv"
"""

GONE = """#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2
exit 9
"""

CRASH = """
import os, sys, time
print("up", flush=True)
while not os.path.exists("FLAG"):
    time.sleep(0.2)
sys.exit("CUDA error: unspecified launch failure")
"""

GPU_JOB = """
    import json, os, time
    print("devices", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
    t0 = time.time()
    for step in range(1, 100000):
        time.sleep(0.2)
        with open(os.environ["GPUJOB_METRICS_FILE"], "a") as f:
            f.write(json.dumps({"t": time.time(), "step": step, "max_steps": 1000, "loss": 1.0 / step}) + "\\n")
        if os.path.exists(os.environ["GPUJOB_STOP_FILE"]):
            break
"""


def test_gpus_sampling_queue_and_cost(ssh_host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpujob.config.hosts import HostStore

    monkeypatch.setenv("COLUMNS", "250")  # the ls table at full width

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text(SMI)
    (bindir / "nvidia-smi").chmod(0o755)
    figures = bindir / "figures.csv"
    # GPU 1 is busy with someone else's process: not free for us
    figures.write_text("0, 0, 5, 81920, 60.5, 31\n1, 97, 50000, 81920, 310.0, 72\n")
    store = HostStore()
    host = store.get(ssh_host)
    host.env["GPUJOB_PATH_PREFIX"] = f"{bindir}{os.pathsep}{host.env['GPUJOB_PATH_PREFIX']}"
    host.price_per_hour = 36.0
    store.save(host)
    root = remote_root(tmp_path, ssh_host)
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.env").write_text("GPUJOB_GPU_SAMPLE=0.5\nGPUJOB_QUEUE_POLL=0.5\n")

    job = write_job(tmp_path, "g", GPU_JOB, "python main.py", gpus=1, stop={"grace": "5s"})
    a = submit(ssh_host, job)["job_id"]
    wait_state(ssh_host, a, ("running",), 30)
    b = submit(ssh_host, job)["job_id"]
    c = submit(ssh_host, job)["job_id"]
    wait_for(lambda: status(ssh_host, c).get("queue_position") == 2, 30, "c second in the queue")
    ls = {j["job_id"]: j for j in json.loads(run_cli("ls", "--host", ssh_host, "--json").stdout)["jobs"]}
    assert ls[a]["state"] == "running" and ls[a]["cuda_visible_devices"] == "0"
    assert ls[b]["state"] == "queued" and ls[b]["queue_position"] == 1
    assert "1 held by other jobs" in ls[b]["queue_reason"]
    table = run_cli("ls", "--host", ssh_host)
    assert "#1" in table.stdout and "#2" in table.stdout

    # samples land in gpu.jsonl, one line per sample, every GPU
    gpu_file = root / "jobs" / a / "gpu.jsonl"
    wait_for(lambda: gpu_file.exists() and len(gpu_file.read_text().splitlines()) >= 2, 20, "gpu samples")
    rec = json.loads(gpu_file.read_text().splitlines()[-1])
    assert [g["index"] for g in rec["gpus"]] == [0, 1] and rec["gpus"][1]["mem_used"] == 50000

    # the other tenant leaves GPU 1: b gets it, c moves up
    figures.write_text("0, 90, 30000, 81920, 300.0, 70\n1, 0, 10, 81920, 60.0, 35\n")
    st_b = wait_state(ssh_host, b, ("running",), 30)
    assert st_b["cuda_visible_devices"] == "1"
    wait_for(lambda: status(ssh_host, c).get("queue_position") == 1, 20, "c first in the queue")
    b_log = root / "jobs" / b / "output.log"
    wait_for(lambda: "devices 1" in b_log.read_text(), 20, "b reports its device")  # printed after start

    # cost so far and a projection from step progress (max_steps in the metrics)
    st_a = status(ssh_host, a)
    est = st_a["billing"]
    assert est["price_per_hour"] == 36.0 and est["cost"] > 0 and est["max_steps"] == 1000
    assert est["projected_cost"] > est["cost"] and est["eta_s"] > 0
    assert "projection" in run_cli("status", a, "--host", ssh_host).stdout
    for j in (c, b, a):
        assert run_cli("stop", j, "--host", ssh_host, "--json").returncode == 0
    doc = json.loads(run_cli("cost", "--host", ssh_host, "--json").stdout)
    per_job = {j["job_id"]: j["cost"] for j in doc["jobs"]}
    assert per_job[a] > 0 and doc["hosts"][ssh_host]["jobs"] == 3
    assert doc["hosts"][ssh_host]["cost"] == pytest.approx(sum(v for v in per_job.values() if v), abs=1e-3)
    assert not job_processes(a) and not job_processes(b)

    # the driver goes while a job with retries runs, and the job crashes: no restart (it would fail
    # again, or train on the CPU for hours), the reason says why
    crash = write_job(tmp_path, "crash", CRASH.replace("FLAG", str(bindir / "crash")), "python main.py", gpus=1,
                      retry={"max_restarts": 3, "backoff": "1s"})
    d = submit(ssh_host, crash)["job_id"]
    wait_state(ssh_host, d, ("running",), 30)
    (bindir / "nvidia-smi").write_text(GONE)
    (bindir / "crash").write_text("")
    st_d = wait_state(ssh_host, d, ("failed",), 60)
    assert "no working GPU now" in st_d["reason"] and st_d["attempt"] == 1, st_d
    assert "no restart" in (root / "jobs" / d / "output.log").read_text()

    # the instance comes back without its GPUs (the driver gone: nvidia-smi is there and fails): a
    # resume is refused with the job left stopped, not started to fail or train on the CPU; a
    # submit names the failure, not "a CPU host"
    r = run_cli("resume", a, "--host", ssh_host)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert f"job {a} was not resumed" in r.stderr and "no working GPU now" in r.stderr, r.stderr
    assert "couldn't communicate with the NVIDIA driver" in r.stderr and "gpujob move" in r.stderr, r.stderr
    assert status(ssh_host, a)["state"] == "stopped"
    r = run_cli("submit", str(job), "--host", ssh_host)
    assert r.returncode == 2 and "has no working GPU now" in r.stderr and "nothing was submitted" in r.stderr, r.stderr


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
