"""The agent keeps a job alive: restarts from complete checkpoints, OOM halving, reboots,
GPUs and their queue, cost. Over the real sshd (and ``local`` where it matters)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_first_path import job_processes, submit, wait_state, write_job


def remote_root(tmp_path: Path, host: str) -> Path:
    return tmp_path / ("remote-root" if host != "local" else "local-root")


def status(host: str, job_id: str) -> dict:
    r = run_cli("status", job_id, "--host", host, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_for(pred, timeout: float = 60, what: str = "") -> None:  # noqa: ANN001
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def training_pid(job_id: str) -> int:
    for pid in job_processes(job_id):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and b"python" in os.path.basename(cmd[0]) and b"main.py" in cmd:
            return pid
    raise AssertionError(f"no training process for {job_id}")


CKPT_JOB = """
    import os, pathlib, time
    ck = pathlib.Path(os.environ["GPUJOB_CKPT_DIR"])
    a = int(os.environ["GPUJOB_ATTEMPT"])
    print("attempt", a, "resume", os.environ["GPUJOB_RESUME"] or "-", flush=True)
    if a == 1:
        for step in (10, 20, 30, 40):
            d = ck / f"step-{step}"
            d.mkdir()
            (d / "state").write_text(str(step))
            (d / ".gpujob-complete").write_text("ok")
        (ck / "step-50").mkdir()  # half-written: no completion marker
        (ck / "step-50" / "state").write_text("half")
        print("ready", flush=True)
        time.sleep(600)
    print("done from", os.environ["GPUJOB_RESUME"], flush=True)
"""


def test_sigkill_restarts_from_last_complete_checkpoint(ssh_host: str, tmp_path: Path) -> None:
    job = write_job(tmp_path, "kill9", CKPT_JOB, "python main.py", checkpoint={"keep": 2},
                    retry={"max_restarts": 2, "on": ["error", "oom", "signal"], "backoff": "0s"})
    job_id = submit(ssh_host, job)["job_id"]
    jd = remote_root(tmp_path, ssh_host) / "jobs" / job_id
    wait_for(lambda: "ready" in (jd / "output.log").read_text() if (jd / "output.log").exists() else False, 60, "ready")
    os.kill(training_pid(job_id), signal.SIGKILL)
    st = wait_state(ssh_host, job_id, ("succeeded", "failed"), 60)
    assert st["state"] == "succeeded", st
    a1, a2 = st["attempts"]
    assert a1["exit_code"] in (-9, 137) and a1["reason"] in ("oom", "signal") and a1["summary"]
    assert a2["exit_code"] == 0 and a2["resume"].endswith("/step-40")
    log = (jd / "output.log").read_text()
    assert "==> gpujob: attempt 1 started" in log and "attempt 1 ended with exit code" in log
    assert "attempt 2 started (resume from " in log and f"done from {a2['resume']}" in log
    assert "restarting" in log
    # rotation by the agent: keep 2 complete; the half-written newer one stays (it may be being written)
    names = sorted(c["name"] for c in st["checkpoints"])
    assert names == ["step-30", "step-40", "step-50"], names
    assert not (jd / "ckpt" / "step-10").exists()
    assert any(json.loads(e).get("event") == "rotated" for e in (jd / "events.jsonl").read_text().splitlines())


OOM_JOB = """
    import os, sys
    a = os.environ["GPUJOB_ATTEMPT"]
    print("attempt", a, "divisor", os.environ["GPUJOB_BATCH_DIVISOR"], flush=True)
    if a == "1":
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        sys.exit(1)
    import flash_attn_not_installed  # attempt 2 fails another way
"""


def test_oom_line_halves_the_batch_then_diagnosis_of_the_last_attempt(ssh_host: str, tmp_path: Path) -> None:
    job = write_job(tmp_path, "oomy", OOM_JOB, "python main.py",
                    retry={"max_restarts": 1, "on_oom": "halve_batch", "backoff": "0s"})
    job_id = submit(ssh_host, job)["job_id"]
    st = wait_state(ssh_host, job_id, ("succeeded", "failed"), 60)
    assert st["state"] == "failed"
    assert [a["reason"] for a in st["attempts"]] == ["oom", "missing_module"]
    assert [a["batch_divisor"] for a in st["attempts"]] == [1, 2] and st["batch_divisor"] == 2
    d = st["diagnosis"]
    assert d["cause"] == "missing_module" and "flash_attn_not_installed" in d["summary"]
    assert d["where"] and "main.py" in d["where"]
    log = (remote_root(tmp_path, ssh_host) / "jobs" / job_id / "output.log").read_text()
    assert "attempt 2 divisor 2" in log and "restarting with GPUJOB_BATCH_DIVISOR=2" in log
    human = run_cli("status", job_id, "--host", ssh_host)
    assert "a Python module is missing" in human.stdout and "requirements.txt" in human.stdout


REBOOT_JOB = """
    import os, pathlib, time
    ck = pathlib.Path(os.environ["GPUJOB_CKPT_DIR"])
    print("attempt", os.environ["GPUJOB_ATTEMPT"], "resume", os.environ["GPUJOB_RESUME"] or "-", flush=True)
    if not os.environ["GPUJOB_RESUME"]:
        d = ck / "step-7"
        d.mkdir()
        (d / ".gpujob-complete").write_text("ok")
        print("ready", flush=True)
        time.sleep(600)
    print("continued from", os.path.basename(os.environ["GPUJOB_RESUME"]), flush=True)
"""


def test_reboot_makes_the_job_lost_and_resume_continues(any_host: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("boot-one\n")
    root = remote_root(tmp_path, any_host)
    if any_host == "local":
        monkeypatch.setenv("GPUJOB_BOOT_ID_FILE", str(boot))  # the local agent inherits the environment
    else:  # an SSH login does not: the agent reads <root>/agent.env
        root.mkdir(parents=True, exist_ok=True)
        (root / "agent.env").write_text(f"GPUJOB_BOOT_ID_FILE={boot}\n")
    job = write_job(tmp_path, "reboot", REBOOT_JOB, "python main.py")
    job_id = submit(any_host, job)["job_id"]
    jd = root / "jobs" / job_id
    wait_for(lambda: "ready" in (jd / "output.log").read_text() if (jd / "output.log").exists() else False, 60, "ready")
    st = status(any_host, job_id)
    assert st["state"] == "running" and st["boot_id"] == "boot-one"
    # the power goes: every process of the job and the agent die at once; a new boot id
    os.kill(st["supervisor_pid"], signal.SIGKILL)
    for pid in job_processes(job_id):
        os.kill(pid, signal.SIGKILL)
    boot.write_text("boot-two\n")
    st = status(any_host, job_id)
    assert st["state"] == "lost" and "rebooted" in st["lost_reason"]
    r = run_cli("resume", job_id, "--host", any_host, "--json")
    assert r.returncode == 0, r.stderr
    st = wait_state(any_host, job_id, ("succeeded", "failed"), 60)
    assert st["state"] == "succeeded" and st["job_id"] == job_id
    assert st["attempts"][-1]["resume"].endswith("step-7") and st["boot_id"] == "boot-two"
    assert "continued from step-7" in (jd / "output.log").read_text()


SMI = """#!/bin/sh
# nvidia-smi stand-in: prints the figures the test wrote (index, util, mem used, mem total, power, temp)
cat "$(dirname "$0")/figures.csv"
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
    from gpujob.hosts import HostStore

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
    assert "devices 1" in (root / "jobs" / b / "output.log").read_text()

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


def test_cpu_host_without_nvidia_smi(tmp_path: Path) -> None:
    """No nvidia-smi: not an error for a job without gpus:, a clear failure for one with."""
    job = write_job(tmp_path, "cpu", "print('ok')", "python main.py")
    job_id = submit("local", job)["job_id"]
    assert wait_state("local", job_id, ("succeeded", "failed"))["state"] == "succeeded"
    assert not (tmp_path / "local-root" / "jobs" / job_id / "gpu.jsonl").exists()
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    (tmp_path / "g").mkdir()
    job = write_job(tmp_path / "g", "gpu", "print('ok')", "python main.py", gpus=2)
    st = wait_state("local", submit("local", job)["job_id"], ("succeeded", "failed"))
    assert st["state"] == "failed" and "no nvidia-smi" in st["reason"]


def test_agent_log_command(tmp_path: Path) -> None:
    root = tmp_path / "local-root"
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.log").write_text("".join(f"2026-01-01 00:00:00 [1] line {i}\n" for i in range(100)))
    r = run_cli("agent-log", "local", "-n", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"2026-01-01 00:00:00 [1] line {i}" for i in (97, 98, 99)]
