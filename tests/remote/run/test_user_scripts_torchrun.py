"""Users' scripts under torchrun (2 CPU processes, gloo), run with only a job file.

- An HF ``Trainer`` script that never imports gpujob: ``gpujob stop`` mid-run makes both ranks
  save one ``checkpoint-N`` (each rank's ``rng_state_<r>.pth``) at the same step and return;
  the job ends ``stopped``, no rank is left hanging in a collective.
- A worker killed by a signal (``kill -9`` of one rank): the job's diagnosis names the signal
  and the rank, not torchrun's ``ChildFailedError``, so ``retry.on: [signal]`` applies.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.byo_helpers import QUIET, job_dir, log_text
from tests.conftest import run_cli
from tests.helpers import job_processes, needs, status, submit, wait_for, wait_state, write_job
from tests.remote.ckpt.test_user_scripts_hf import HF_MODEL

TORCHRUN = "torchrun --standalone --nproc-per-node=2 main.py"

# as a user writes it: tiny GPT-2 built in the script, data in memory, resume only from argv
HF_DDP = HF_MODEL + """
    p = argparse.ArgumentParser()
    p.add_argument("--output_dir", default="out")
    p.add_argument("--resume_from_checkpoint", default=None)
    a = p.parse_args()
    args = TrainingArguments(output_dir=a.output_dir, max_steps=500, save_steps=1000, logging_steps=1,
                             per_device_train_batch_size=4, report_to="none", use_cpu=True, ddp_backend="gloo")
    Trainer(model=model, args=args, train_dataset=Data()).train(resume_from_checkpoint=a.resume_from_checkpoint)
    # as torch.distributed asks of every DDP script: without it gloo's threads can be torn down mid-exit
    # ("terminate called without an active exception", SIGABRT) and torchrun exits 1
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
"""


def test_hf_trainer_under_torchrun_stops_both_ranks_at_one_checkpoint(isolated: Path, tmp_path: Path) -> None:
    needs("torch", "transformers", "accelerate")
    job = write_job(tmp_path, "ddphf", HF_DDP, TORCHRUN + " --output_dir $GPUJOB_CKPT_DIR", env=QUIET,
                    stop={"grace": "60s"})
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    metrics = jd / "metrics.jsonl"
    wait_for(lambda: metrics.exists() and '"loss"' in metrics.read_text(), 120, lambda: log_text(jd)[-3000:])
    r = run_cli("stop", job_id, "--host", "local")
    assert r.returncode == 0, r.stderr
    st = wait_state("local", job_id, ("stopped", "failed", "succeeded"), 90, root=jd.parent.parent)
    assert st["state"] == "stopped", st
    assert st["exit_code"] == 0, log_text(jd)[-3000:]
    done = [c for c in st["checkpoints"] if c["complete"]]
    assert [c["kind"] for c in done] == ["hf"], st["checkpoints"]
    ck = jd / "ckpt" / done[0]["name"]
    step = json.loads((ck / "trainer_state.json").read_text())["global_step"]
    assert 0 < step < 500 and ck.name == f"checkpoint-{step}"
    assert sorted(p.name for p in ck.glob("rng_state*")) == ["rng_state_0.pth", "rng_state_1.pth"]
    assert "stop requested" in log_text(jd)
    wait_for(lambda: not [p for p in _pids(job_id)], 10, "every rank gone")


KILLED_RANK = """
    import os, signal, time
    if os.environ["RANK"] == "1":
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
"""

FAILED_RANK = """
    import os, time
    if os.environ["RANK"] == "1":
        raise ValueError("bad record in shard 1")
    time.sleep(60)
"""


@pytest.mark.parametrize(("script", "cause", "summary"), [
    (KILLED_RANK, "signal", "torchrun worker rank 1 killed by SIGKILL"),
    (FAILED_RANK, "error", "ValueError: bad record in shard 1"),
], ids=["killed", "raised"])
def test_a_failed_torchrun_worker_is_the_diagnosis_not_torchrun(isolated: Path, tmp_path: Path, script: str,
                                                                cause: str, summary: str) -> None:
    """A worker killed by a signal is that signal (so ``retry.on: [signal]`` applies), and a
    worker's exception is that exception, not torchrun's own ChildFailedError."""
    needs("torch")
    job = write_job(tmp_path, "ddpfail", script, TORCHRUN, env=QUIET, retry={"max_restarts": 0})
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    st = wait_state("local", job_id, ("failed", "succeeded"), 90, root=jd.parent.parent)
    assert st["state"] == "failed", st
    d = status("local", job_id)["diagnosis"]
    assert d["cause"] == cause and d["summary"].startswith(summary), d
    assert "ChildFailedError" in log_text(jd)  # what torchrun itself said, which is not the cause


def _pids(job_id: str) -> list[int]:
    alive = []
    for pid in job_processes(job_id):
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z":
                alive.append(pid)
        except OSError:
            pass
    return alive
