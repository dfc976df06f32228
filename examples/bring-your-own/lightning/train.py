"""An ordinary PyTorch Lightning script, as users bring it: no gpujob import.

A small regression model; ``ModelCheckpoint`` writes ``epoch=E-step=S.ckpt`` every few steps
plus ``last.ckpt``; ``--ckpt_path`` resumes (``trainer.fit(..., ckpt_path=...)``). The strategy
is DDP whenever there is more than one device (or with ``--strategy ddp`` on one); the progress
bar and the TensorBoard logger carry the loss.

    python train.py --ckpt_dir ckpt --max_steps 40
    python train.py --ckpt_dir ckpt --max_steps 80 --ckpt_path ckpt/last.ckpt
    python train.py --devices 2 --strategy ddp        # two processes (CPU: gloo)
"""

import argparse
import time

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self, lr: float = 0.05, step_seconds: float = 0.0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)
        self.log("loss", loss, prog_bar=True)
        if self.hparams.step_seconds:
            time.sleep(self.hparams.step_seconds)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def data() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 8, generator=g)
    y = torch.sin(x @ torch.linspace(-1, 1, 8))
    return DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, generator=g)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt_dir", default="checkpoints")
    ap.add_argument("--log_dir", default="lightning_logs")
    ap.add_argument("--max_steps", type=int, default=40)
    ap.add_argument("--every_n_steps", type=int, default=10)
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--strategy", default=None, help="ddp (default with several devices) or auto")
    ap.add_argument("--ckpt_path", default=None)
    ap.add_argument("--step_seconds", type=float, default=0.0)
    args = ap.parse_args()

    L.seed_everything(0)
    strategy = args.strategy or ("ddp" if args.devices > 1 else "auto")
    if strategy == "ddp":
        strategy = DDPStrategy(process_group_backend="nccl" if torch.cuda.is_available() else "gloo")
    trainer = L.Trainer(
        accelerator="auto",
        devices=args.devices,
        strategy=strategy,
        max_steps=args.max_steps,
        max_epochs=-1,
        log_every_n_steps=2,
        logger=TensorBoardLogger(args.log_dir, name="", version="run"),
        callbacks=[ModelCheckpoint(dirpath=args.ckpt_dir, every_n_train_steps=args.every_n_steps,
                                   save_top_k=-1, save_last=True)],
        enable_model_summary=False,
    )
    trainer.fit(Regression(step_seconds=args.step_seconds), data(), ckpt_path=args.ckpt_path)
    print(f"finished at step {trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
