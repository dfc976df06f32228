"""GPU health during a run: the agent's sampler reads the uncorrected ECC counter (the tests'
nvidia-smi stand-in on PATH, its count in a file the test raises mid-run); a new error is kept
as the job's diagnosis, notified (a real HTTP server), and with ``retry.move_after`` set stops
the job so that ``gpujob guard`` moves it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import REPO, run_cli
from tests.helpers import ENDED, submit, wait_for, wait_state
from tests.remote.run.test_events import Hook

SLEEPER = "import time\nfor i in range(600):\n    print('step', i, flush=True)\n    time.sleep(0.3)\n"


def test_new_ecc_error_is_diagnosed_notified_and_the_job_moves(tmp_path: Path, hook: Hook, ssh_host: str,
                                                               monkeypatch) -> None:  # noqa: ANN001
    ecc = tmp_path / "ecc"
    ecc.write_text("5")  # errors from before the job: the baseline, not news
    monkeypatch.setenv("PATH", f"{REPO / 'tests' / 'stand_ins'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI_ECC_FILE", str(ecc))
    monkeypatch.setenv("GPUJOB_GPU_SAMPLE", "0.3")
    monkeypatch.setenv("GPUJOB_GPU_HEALTH_EVERY", "0.3")
    d = tmp_path / "sick"
    d.mkdir()
    (d / "main.py").write_text(SLEEPER)
    (d / "job.yaml").write_text(json.dumps({
        "name": "sick", "run": "python main.py", "retry": {"move_after": "1h", "move_to": [ssh_host]},
        "notify": {"channels": [{"type": "webhook", "url": hook.url}]}}))
    job_id = submit("local", d / "job.yaml")["job_id"]  # from its file: guard knows how to send it again
    root = Path(os.environ["GPUJOB_LOCAL_ROOT"])
    wait_for(lambda: (root / "jobs" / job_id / "gpu.jsonl").exists(), 60, "the first GPU samples")
    wait_state("local", job_id, ("running",), 60, root=root)
    ecc.write_text("7")
    sent = hook.wait_for("gpu_error", 60)["body"]
    assert sent["reason"] == "GPU 0: 2 new uncorrected ECC error(s)", sent
    st = wait_state("local", job_id, ENDED, 60, root=root)
    assert st["state"] == "stopped" and st["reason"] == "gpu_error: GPU 0: 2 new uncorrected ECC error(s)", st
    assert st.get("gpu_error") == "GPU 0: 2 new uncorrected ECC error(s)", st
    assert "GPU error: GPU 0: 2 new" in run_cli("tail", job_id, "--host", "local", "-n", "50").stdout
    assert "2 new uncorrected ECC" in run_cli("status", job_id, "--host", "local").stdout
    r = run_cli("guard", job_id, "--once", timeout=180)  # the laptop moves it to a sound host
    assert r.returncode == 0 and "local stopped it for a GPU error" in r.stderr + r.stdout, r.stderr + r.stdout
    assert wait_state(ssh_host, job_id, ("running",), 60)["moves"]
