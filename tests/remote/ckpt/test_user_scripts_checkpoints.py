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
from tests.remote.run.test_agent import training_pid

LOOP = """
    import argparse, os, time
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--resume", default="")
    p.add_argument("--save_dir", default=".")
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args()
    os.makedirs(a.save_dir, exist_ok=True)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    if a.resume:
        state = torch.load(a.resume)
        model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
        print("resumed at step", start, flush=True)
    for step in range(start + 1, a.steps + 1):
        x = torch.randn(16, 4)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad(); loss.backward(); opt.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % 5 == 0:
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step}
            torch.save(state, os.path.join(a.save_dir, f"ckpt_{step}.pt"))
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


# an HF script as users write it: output_dir fixed in the code, the job file says nothing about it
HF_RESULTS = """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    data = [{"input_ids": x, "labels": x} for x in torch.randint(0, 64, (32, 8))]
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
    args = TrainingArguments(output_dir="./results", max_steps=4, save_steps=2, per_device_train_batch_size=4,
                             report_to="none", use_cpu=True)
    Trainer(model=model, args=args, train_dataset=data).train()
"""


def test_checkpoints_where_gpujob_does_not_look_are_named_with_the_fix(isolated: Path, tmp_path: Path) -> None:
    """Status, the log and ``pull --latest`` say where the checkpoints went and what to add to the
    job file, instead of a bare "no complete checkpoint"."""
    needs("torch", "transformers", "accelerate")
    job = write_job(tmp_path, "hfresults", HF_RESULTS, "python main.py", env=QUIET)
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    st = wait_state("local", job_id, ("succeeded", "failed"), 90, root=jd.parent.parent)
    assert st["state"] == "succeeded" and st["checkpoints"] == [], st
    assert st["stray_checkpoints"]["dir"] == "results", st
    fix = "add checkpoint: {dir: results} to the job file"
    assert fix in st["stray_checkpoints"]["advice"] and fix in log_text(jd)
    r = run_cli("pull", job_id, "--host", "local", "--latest")
    assert r.returncode == 2 and "no complete checkpoint" in r.stderr and fix in r.stderr, r.stderr
