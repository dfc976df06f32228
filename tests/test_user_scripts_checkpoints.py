"""A user's loop that ``torch.save``s ``ckpt_<step>.pt`` into its working folder (the code folder)
and takes the file to resume from as ``--resume``: with ``checkpoint: {dir: ., pattern: ...}``
in the job file, a ``kill -9`` restarts from the newest complete file, status lists the files,
rotation keeps ``keep`` of them and nothing else of the code."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from tests.byo_helpers import QUIET, job_dir, log_text
from tests.conftest import run_cli
from tests.helpers import needs, status, submit, wait_for, wait_state, write_job
from tests.test_agent import training_pid

LOOP = """
    import argparse, time
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--resume", default="")
    a = p.parse_args()
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    if a.resume:
        state = torch.load(a.resume)
        model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
        print("resumed at step", start, flush=True)
    for step in range(start + 1, 61):
        x = torch.randn(16, 4)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad(); loss.backward(); opt.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % 5 == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, f"ckpt_{step}.pt")
        time.sleep(0.05)
"""


def test_checkpoints_in_the_working_folder(isolated: Path, tmp_path: Path) -> None:
    needs("torch")
    job = write_job(tmp_path, "cwdloop", LOOP, 'python main.py ${GPUJOB_RESUME:+--resume "$GPUJOB_RESUME"}', env=QUIET,
                    checkpoint={"dir": ".", "pattern": "ckpt_*.pt", "keep": 2},
                    retry={"max_restarts": 1, "backoff": "0s"})
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    wait_for(lambda: (jd / "code" / "ckpt_15.pt").exists(), 60, lambda: log_text(jd)[-2000:])
    os.kill(training_pid(job_id), signal.SIGKILL)
    st = wait_state("local", job_id, ("succeeded", "failed"), 90, root=jd.parent.parent)
    assert st["state"] == "succeeded" and st["attempt"] == 2, st
    resumed = int(re.search(r"resumed at step (\d+)", log_text(jd)).group(1))
    assert resumed >= 15 and f"resume from {jd}/ckpt/ckpt_{resumed}.pt" in log_text(jd)
    # rotation keeps 2 of the series (and the one attempt 2 resumed from) and every other file
    kept = {f"ckpt_{resumed}.pt", "ckpt_55.pt", "ckpt_60.pt"}
    wait_for(lambda: {p.name for p in (jd / "code").glob("ckpt_*.pt")} == kept, 30, "rotation to 2 checkpoints")
    assert {c["name"] for c in status("local", job_id)["checkpoints"]} == kept
    assert (jd / "code" / "main.py").exists() and (jd / "code" / "job.yaml").exists()


def test_the_working_folder_needs_a_pattern(isolated: Path, tmp_path: Path) -> None:
    job = write_job(tmp_path, "cwdnopat", "print('hi')\n", "python main.py", checkpoint={"dir": "."})
    r = run_cli("submit", str(job), "--host", "local")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "checkpoint.dir: '.' (the code folder itself) needs a pattern" in r.stderr, r.stderr
