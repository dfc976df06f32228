"""A Lightning script as users write it (``ModelCheckpoint(dirpath="checkpoints",
every_n_train_steps=...)``, ``fit()`` with no ``ckpt_path``), with only a job file naming that
folder: after a ``kill -9`` the restart goes on from the newest complete checkpoint (gpujob's
hook passes GPUJOB_RESUME to ``fit``), and status shows its loss and progress."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.byo_helpers import QUIET, job_dir, log_text
from tests.helpers import needs, submit, wait_for, wait_state, write_job
from tests.remote.run.test_agent import training_pid

LIGHTNING = """
    import time
    import torch, lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    class M(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)
        def training_step(self, batch, i):
            x, y = batch
            time.sleep(0.1)
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss, prog_bar=True)
            return loss
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), 0.05)

    x = torch.randn(96, 4)
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    ck = ModelCheckpoint(dirpath="checkpoints", every_n_train_steps=3, save_last=True, save_top_k=-1)
    trainer = L.Trainer(max_epochs=2, callbacks=[ck], accelerator="cpu", logger=False)
    trainer.fit(M(), dl)
    print("finished at step", trainer.global_step)
"""


def test_lightning_script_without_ckpt_path_restarts_from_its_newest_checkpoint(isolated: Path, tmp_path: Path) -> None:
    needs("torch", "lightning")
    job = write_job(tmp_path, "plrich", LIGHTNING, "python main.py", env=QUIET,
                    checkpoint={"dir": "checkpoints"}, retry={"max_restarts": 1, "backoff": "0s"})
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    wait_for(lambda: (jd / "ckpt" / "last.ckpt").exists() and (jd / "ckpt" / "epoch=0-step=6.ckpt").exists(), 60,
             lambda: log_text(jd)[-2000:])
    os.kill(training_pid(job_id), signal.SIGKILL)
    st = wait_state("local", job_id, ("succeeded", "failed"), 90, root=jd.parent.parent)
    assert st["state"] == "succeeded" and st["attempt"] == 2, st
    second = log_text(jd).split("==> gpujob: attempt 2 started", 1)[1]
    assert "[gpujob] resuming from" in second and "Restored all states from the checkpoint" in second
    assert "finished at step 24" in second
    assert st["last_metrics"]["step"] >= 23 and st["loss_key"] == "train_loss", st
