"""docs/bring-your-own.md's recipes for public script shapes, each job file taken from the doc as it is
written there and run on a small script of that shape: a GPT trainer resuming with a flag that takes
no path (``--init_from=resume``), and LightningCLI with no resume code of its own. (The image-trainer
and no-resume recipes run in tests/remote/ckpt/test_scripts_ckpt_discovery.py.)"""

from __future__ import annotations

import json
import os
import re
import signal
import textwrap
from pathlib import Path

import pytest

from tests.byo_helpers import job_dir, log_text
from tests.conftest import REPO, run_cli
from tests.helpers import needs, submit, wait_for, wait_state
from tests.remote.run.test_agent import training_pid


def recipe(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    """A project holding ``files`` (dedented) and the recipe ``name``'s job file from the doc, verbatim."""
    doc = (REPO / "docs" / "bring-your-own.md").read_text()
    m = re.search(r"```yaml\n(# recipe: " + re.escape(name) + r"\n.*?)```", doc, re.S)
    assert m, f"no recipe {name} in docs/bring-your-own.md"
    d = tmp_path / name
    for rel, text in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(textwrap.dedent(text))
    (d / "job.yaml").write_text(m.group(1))
    return d / "job.yaml"


# in the shape of a popular GPT trainer: a configurator that execs the config file and takes --key=value,
# one ckpt.pt in out_dir every eval_interval, init_from=resume reading it back (zip, as torch.save writes)
GPT_TRAIN = """
    import json, os, sys, time, zipfile
    out_dir = "out"; eval_interval = 2000; max_iters = 600000; init_from = "scratch"; gradient_accumulation_steps = 40
    for arg in sys.argv[1:]:
        if "=" not in arg:
            print("Overriding config with %s:" % arg)
            src = open(arg).read()
            print(src)
            exec(src)
        else:
            key, val = arg[2:].split("=", 1)
            print("Overriding: %s = %s" % (key, val))
            globals()[key] = val if isinstance(globals()[key], str) else type(globals()[key])(val)
    os.makedirs(out_dir, exist_ok=True)
    iter_num = 0
    if init_from == "resume":
        print("Resuming training from %s" % out_dir)
        iter_num = json.loads(zipfile.ZipFile(os.path.join(out_dir, "ckpt.pt")).read("state"))["iter_num"]
    while iter_num <= max_iters:
        if iter_num % eval_interval == 0 and iter_num > 0:
            print("step %d: train loss %.4f, val loss %.4f" % (iter_num, 2.0 / iter_num, 2.1 / iter_num))
            print("saving checkpoint to %s" % out_dir, flush=True)
            with zipfile.ZipFile(os.path.join(out_dir, "ckpt.pt"), "w") as z:
                z.writestr("state", json.dumps({"iter_num": iter_num}))
        print("iter %d: loss %.4f, time 45.60ms, mfu 8.20%%" % (iter_num, 1.0 / (1 + iter_num)), flush=True)
        time.sleep(0.05)
        iter_num += 1
"""
GPT_CONFIG = """
    # train a miniature character-level model
    eval_interval = 10 # keep frequent because we'll overfit
    gradient_accumulation_steps = 1
    learning_rate = 1e-3 # with baby networks can afford to go a bit higher
    max_iters = 60
"""


def _saved_iter(path: Path) -> int:
    import zipfile

    try:
        return json.loads(zipfile.ZipFile(path).read("state"))["iter_num"]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return 0


def test_gpt_trainer_recipe_resumes_with_init_from(tmp_path: Path) -> None:
    job = recipe(tmp_path, "gpt-trainer", {"train.py": GPT_TRAIN, "config/train_char.py": GPT_CONFIG})
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    wait_for(lambda: _saved_iter(jd / "ckpt" / "ckpt.pt") >= 20, 60, lambda: log_text(jd)[-2000:])
    os.kill(training_pid(job_id, b"train.py"), signal.SIGKILL)
    wait_for(lambda: "attempt 2 started" in log_text(jd) and _saved_iter(jd / "ckpt" / "ckpt.pt") >= 30, 60,
             lambda: log_text(jd)[-2000:])
    # a kill while it overwrites its one ckpt.pt leaves it cut short: the next attempt gets back the last
    # complete version gpujob kept of it (checkpoint.backup), and says so
    pid = training_pid(job_id, b"train.py")
    os.kill(pid, signal.SIGSTOP)
    kept = jd / "kept" / ".kept.json"
    wait_for(lambda: kept.exists() and "ckpt.pt" in json.loads(kept.read_text()), 60, "the kept copy of ckpt.pt")
    ckpt = jd / "ckpt" / "ckpt.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:20])
    os.kill(pid, signal.SIGKILL)
    st = wait_state("local", job_id, ("succeeded", "failed"), 90, root=jd.parent.parent)
    assert st["state"] == "succeeded" and st["attempt"] == 3, st
    text = log_text(jd)
    assert "--init_from=resume" not in text.split("attempt 2 started")[0]  # the first run starts from scratch
    assert "Resuming training from" in text and "iter 60: loss" in text
    assert f"attempt 2 started (resume from {jd}/ckpt/ckpt.pt)" in text
    assert "ckpt.pt restored from the copy kept of its last complete version" in text.split("attempt 3 started")[0]
    assert f"attempt 3 started (resume from {jd}/ckpt/ckpt.pt)" in text
    rows = [json.loads(x) for x in (jd / "metrics.log.jsonl").read_text().splitlines()]
    loss_rows = [r for r in rows if "loss" in r]
    assert loss_rows and all(r["max_steps"] == 60 for r in loss_rows)  # max_iters from the config file
    assert not any("learning_rate" in r or "gradient_accumulation_steps" in r for r in rows)  # config echoes


LIGHTNING_CLI = """
    import os
    import time
    import lightning as L
    import torch
    from lightning.pytorch.cli import LightningCLI
    from torch.utils.data import DataLoader, TensorDataset


    class Model(L.LightningModule):
        def __init__(self, lr: float = 0.1, sleep: float = 0.0) -> None:
            super().__init__()
            self.lin, self.lr, self.sleep = torch.nn.Linear(4, 1), lr, sleep

        def training_step(self, batch, idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.lin(x), y)
            if os.environ.get("GPUJOB_ATTEMPT") == "1":  # slow until the kill; the restart only has to finish
                time.sleep(self.sleep)
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)


    class Data(L.LightningDataModule):
        def train_dataloader(self):
            g = torch.Generator().manual_seed(0)
            x = torch.randn(64, 4, generator=g)
            return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


    if __name__ == "__main__":
        LightningCLI(Model, Data)
"""
LIGHTNING_CONFIG = """
    trainer:
      max_epochs: 8
      accelerator: cpu
      log_every_n_steps: 2
      enable_model_summary: false
    model:
      sleep: 0.08
"""


@pytest.mark.slow
def test_lightning_cli_recipe_resumes_without_resume_code(tmp_path: Path) -> None:
    needs("torch", "lightning", "jsonargparse", "rich")
    job = recipe(tmp_path, "lightning-cli", {"main.py": LIGHTNING_CLI, "config.yaml": LIGHTNING_CONFIG})
    spec = job.read_text().replace("retry:", "env: {OMP_NUM_THREADS: '1'}\nretry:")
    job.write_text(spec)
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    ckpts = jd / "ckpt" / "lightning_logs" / "version_0" / "checkpoints"
    wait_for(lambda: any(ckpts.glob("epoch=1-*.ckpt")), 120, lambda: log_text(jd)[-2000:])
    # with rich installed Lightning would draw its rich bar, which writes nothing into a file until the
    # end; the job's output is no terminal, so it gets the plain bar: tail shows progress while it trains
    r = run_cli("tail", job_id, "--host", "local")
    assert re.search(r"Epoch \d+: +\d+%.*it/s", r.stdout), r.stdout[-2000:]
    os.kill(training_pid(job_id, b"main.py"), signal.SIGKILL)
    st = wait_state("local", job_id, ("succeeded", "failed"), 120, root=jd.parent.parent)
    assert st["state"] == "succeeded" and st["attempt"] == 2, log_text(jd)[-3000:]
    text = log_text(jd)
    assert "[gpujob] resuming from" in text and "/lightning_logs/version_0/checkpoints/epoch=" in text, text[-3000:]
    assert re.search(r"Epoch 7: +100%", text.split("attempt 2 started")[1]), text[-2000:]  # the plain bar, in the log
