"""The agent keeps a job alive: restarts from complete checkpoints (SIGKILL, rotation) and
the CUDA OOM halve-batch restart, on `local` and over the real sshd."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.conftest import run_cli
from tests.helpers import job_processes, remote_root, submit, wait_for, wait_state, write_job


def training_pid(job_id: str, script: bytes = b"main.py") -> int:
    for pid in job_processes(job_id):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and b"python" in os.path.basename(cmd[0]) and script in cmd:
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


def test_sigkill_restarts_from_last_complete_checkpoint(any_host: str, tmp_path: Path) -> None:
    job = write_job(tmp_path, "kill9", CKPT_JOB, "python main.py", checkpoint={"keep": 2},
                    retry={"max_restarts": 2, "on": ["error", "oom", "signal"], "backoff": "0s"})
    job_id = submit(any_host, job)["job_id"]
    jd = remote_root(tmp_path, any_host) / "jobs" / job_id
    wait_for(lambda: "ready" in (jd / "output.log").read_text() if (jd / "output.log").exists() else False, 60, "ready")
    os.kill(training_pid(job_id), signal.SIGKILL)
    st = wait_state(any_host, job_id, ("succeeded", "failed"), 60)
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


def test_oom_line_halves_the_batch_then_diagnosis_of_the_last_attempt(any_host: str, tmp_path: Path) -> None:
    job = write_job(tmp_path, "oomy", OOM_JOB, "python main.py",
                    retry={"max_restarts": 1, "on_oom": "halve_batch", "backoff": "0s"})
    job_id = submit(any_host, job)["job_id"]
    st = wait_state(any_host, job_id, ("succeeded", "failed"), 60)
    assert st["state"] == "failed"
    assert [a["reason"] for a in st["attempts"]] == ["oom", "missing_module"]
    assert [a["batch_divisor"] for a in st["attempts"]] == [1, 2] and st["batch_divisor"] == 2
    d = st["diagnosis"]
    assert d["cause"] == "missing_module" and "flash_attn_not_installed" in d["summary"]
    assert d["where"] and "main.py" in d["where"]
    log = (remote_root(tmp_path, any_host) / "jobs" / job_id / "output.log").read_text()
    assert "attempt 2 divisor 2" in log and "restarting with GPUJOB_BATCH_DIVISOR=2" in log
    human = run_cli("status", job_id, "--host", any_host)
    assert "a Python module is missing" in human.stdout and "requirements.txt" in human.stdout
