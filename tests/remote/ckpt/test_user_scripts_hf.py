"""An HF ``Trainer`` script that never resumes (``trainer.train()``, ``output_dir`` fixed in the
code), with only a job file naming that folder: after a ``kill -9`` the restart goes on from the
newest complete ``checkpoint-N`` (gpujob's hook passes GPUJOB_RESUME to ``train()``), not from
step 0."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from tests.byo_helpers import QUIET, job_dir, log_text, metric_steps
from tests.helpers import needs, submit, wait_for, wait_state, write_job
from tests.remote.run.test_agent import training_pid

# the model and data the users' HF scripts of these tests build: a tiny GPT-2, data in memory
HF_MODEL = """
    import argparse, time
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Data(torch.utils.data.Dataset):
        def __init__(self):
            self.x = torch.randint(0, 64, (512, 8), generator=torch.Generator().manual_seed(0))
        def __len__(self):
            return len(self.x)
        def __getitem__(self, i):
            time.sleep(0.02)  # a slow data pipeline: steps long enough to act in the middle
            return {"input_ids": self.x[i], "labels": self.x[i]}

    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
"""

HF_NO_RESUME = HF_MODEL + """
    args = TrainingArguments(output_dir="./results", max_steps=16, save_steps=4, logging_steps=1,
                             per_device_train_batch_size=4, report_to="none", use_cpu=True)
    trainer = Trainer(model=model, args=args, train_dataset=Data())
    trainer.train()
    print("finished at step", trainer.state.global_step)
"""


def test_hf_script_without_resume_code_restarts_from_its_newest_checkpoint(isolated: Path, tmp_path: Path) -> None:
    needs("torch", "transformers", "accelerate")
    job = write_job(tmp_path, "hfnoresume", HF_NO_RESUME, "python main.py", env=QUIET,
                    checkpoint={"dir": "results"}, retry={"max_restarts": 1, "backoff": "0s"})
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    wait_for(lambda: (jd / "ckpt" / "checkpoint-4" / "trainer_state.json").exists(), 90, lambda: log_text(jd)[-2000:])
    os.kill(training_pid(job_id), signal.SIGKILL)
    st = wait_state("local", job_id, ("succeeded", "failed"), 120, root=jd.parent.parent)
    assert st["state"] == "succeeded" and st["attempt"] == 2, st
    second = log_text(jd).split("==> gpujob: attempt 2 started", 1)[1]
    resumed = int(re.search(r"\[gpujob\] resuming from \S+/checkpoint-(\d+) ", second).group(1))
    assert resumed >= 4 and "finished at step 16" in second
    # attempt 2 trained only the steps after the checkpoint
    assert min(metric_steps(jd, since=st["attempts"][1]["started_at"])) == resumed + 1
