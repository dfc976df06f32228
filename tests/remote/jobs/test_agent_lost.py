"""Liveness: a job from before the last boot is ``lost``; ``resume`` continues it from its
newest complete checkpoint under the same id (local and over the real sshd)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import ENDED, job_processes, remote_root, status, submit, wait_for, wait_state, write_job

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


def test_dead_agent_with_a_stale_heartbeat_is_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No reboot: the supervisor died (its pid may be reused: only a process carrying the job
    id counts). A stale heartbeat makes the job ``lost``, recorded, saying its training
    processes still run; ``resume`` ends them and restarts from the checkpoint."""
    monkeypatch.setenv("GPUJOB_STALE_AFTER", "2")
    job = write_job(tmp_path, "stale", REBOOT_JOB, "python main.py")
    job_id = submit("local", job)["job_id"]
    jd = tmp_path / "local-root" / "jobs" / job_id
    wait_for(lambda: "ready" in (jd / "output.log").read_text() if (jd / "output.log").exists() else False, 60, "ready")
    st = status("local", job_id)
    os.kill(st["supervisor_pid"], signal.SIGKILL)  # the agent dies; the training goes on, orphaned
    wait_for(lambda: status("local", job_id)["state"] == "lost", 20, "lost")
    st = status("local", job_id)
    assert "agent is gone" in st["lost_reason"] and "of the job still run" in st["lost_reason"]
    assert json.loads((jd / "status.json").read_text())["state"] == "lost"  # recorded, not only concluded
    assert run_cli("resume", job_id, "--json").returncode == 0  # ends the orphans, restarts from step-7
    st = wait_state("local", job_id, ("succeeded", "failed"))
    assert st["state"] == "succeeded" and st["attempts"][-1]["resume"].endswith("step-7")
    assert not job_processes(job_id)


WATCHES_STOP = """
import os, time
stop = os.environ["GPUJOB_STOP_FILE"]
print("ready", flush=True)
while not os.path.exists(stop):  # much faster than the supervisor's own look at the file
    time.sleep(0.01)
print("saw the stop file: saving and leaving", flush=True)
"""


def test_a_job_that_exits_0_on_the_stop_file_is_stopped_not_succeeded(tmp_path: Path) -> None:
    """Code that watches the stop file may leave before the supervisor's next look at it; the
    attempt still ended because the user asked (stopped, reason kept), never `succeeded`."""
    job = write_job(tmp_path, "watcher", WATCHES_STOP, "python main.py")
    job_id = submit("local", job)["job_id"]
    wait_for(lambda: "ready" in log_of(tmp_path, job_id), 60, "the job's ready line")
    r = run_cli("stop", job_id, "--json")
    assert r.returncode == 0, r.stderr
    st = wait_state("local", job_id, ENDED, 60)
    assert st["state"] == "stopped" and st["exit_code"] == 0, st
    assert "saw the stop file" in log_of(tmp_path, job_id)


def log_of(tmp_path: Path, job_id: str) -> str:
    p = remote_root(tmp_path, "local") / "jobs" / job_id / "output.log"
    return p.read_text() if p.exists() else ""
