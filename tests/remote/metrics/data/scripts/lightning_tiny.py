"""A tiny Lightning run that never imports gpujob: a progress bar with loss=..., TensorBoardLogger events."""

import argparse
import os
import time

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--max_epochs", type=int, default=2)
ap.add_argument("--bar", default="tqdm", help="tqdm, or rich (Lightning's default when rich is installed)")
ap.add_argument("--sleep", type=float, default=0.0, help="seconds per training step")
ap.add_argument("--hold_last_epoch_until", default="",
                help="a file: wait (at most 300 s) for it before the last epoch, so a watcher sees the run mid-way")
args = ap.parse_args()


class HoldBeforeLastEpoch(L.Callback):
    def on_train_epoch_start(self, trainer, module) -> None:
        if args.hold_last_epoch_until and trainer.current_epoch == args.max_epochs - 1:
            deadline = time.time() + 300
            while not os.path.exists(args.hold_last_epoch_until) and time.time() < deadline:
                time.sleep(0.1)


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        time.sleep(args.sleep)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


torch.manual_seed(0)
x = torch.randn(64, 4)
ds = TensorDataset(x, x.sum(1, keepdim=True))
trainer = L.Trainer(max_epochs=args.max_epochs, accelerator="cpu", log_every_n_steps=2, enable_checkpointing=False,
                    default_root_dir=".", enable_model_summary=False,
                    callbacks=[HoldBeforeLastEpoch()]
                    + ([L.pytorch.callbacks.TQDMProgressBar()] if args.bar == "tqdm" else []))
trainer.fit(Tiny(), DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=16))
