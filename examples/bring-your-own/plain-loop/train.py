"""An ordinary PyTorch training loop, as users bring it: no gpujob import.

Every ``--save_every`` steps it ``torch.save``s ``checkpoint_<step>.pt`` (model, optimizer,
step) straight into ``--ckpt_dir``; at start it reloads ``--resume`` if given, else the newest
``checkpoint_*.pt`` it finds there. Ctrl-C (SIGINT, what ``gpujob stop`` sends it) lets the
step under way finish, then saves and exits 0: a KeyboardInterrupt raised mid-step (between
the optimizer's update and the step count) would save an update the count does not know. It prints ``step N loss x`` lines and shows a tqdm bar when tqdm is installed.

Each step's batch depends only on the step number, so a run resumed from a checkpoint ends
with exactly the weights of an uninterrupted run (printed as ``weights <sha256>``).

    python train.py --ckpt_dir ckpt --steps 200
"""

import argparse
import glob
import hashlib
import os
import re
import signal
import sys
import time

import torch

try:
    from tqdm import tqdm
except ImportError:  # the bar is optional
    tqdm = None


def newest_checkpoint(folder: str):
    found = []
    for path in glob.glob(os.path.join(folder, "checkpoint_*.pt")):
        m = re.search(r"checkpoint_(\d+)\.pt$", path)
        if m:
            found.append((int(m.group(1)), path))
    return max(found)[1] if found else None


def batch(step: int):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(64, 16, generator=g)
    return x, torch.sin(x.sum(dim=1, keepdim=True))


def weights_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt_dir", default="checkpoints")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--save_every", type=int, default=20)
    ap.add_argument("--log_every", type=int, default=5)
    ap.add_argument("--resume", default=None, help="a checkpoint file (default: the newest in --ckpt_dir)")
    ap.add_argument("--step_seconds", type=float, default=0.0)
    args = ap.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    os.makedirs(args.ckpt_dir, exist_ok=True)

    def save(step: int) -> None:
        path = os.path.join(args.ckpt_dir, f"checkpoint_{step}.pt")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path)
        print(f"saved {path}", flush=True)

    step = 0
    resume = args.resume or newest_checkpoint(args.ckpt_dir)
    if resume:
        state = torch.load(resume)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        print(f"resumed from {resume} at step {step}", flush=True)

    interrupted = []  # set by Ctrl-C: the loop saves at the end of the step under way
    signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    bar = tqdm(total=args.steps, initial=step, file=sys.stderr) if tqdm else None
    try:
        while step < args.steps and not interrupted:
            x, y = batch(step)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if bar:
                bar.update(1)
            if step % args.log_every == 0:
                print(f"step {step} loss {loss.item():.5f}", flush=True)
            if step % args.save_every == 0:
                save(step)
            if args.step_seconds:
                time.sleep(args.step_seconds)
    finally:
        if bar:
            bar.close()
    if interrupted:
        print(f"interrupted at step {step}", flush=True)
        save(step)
        sys.exit(0)
    if step % args.save_every:
        save(step)
    print(f"weights {weights_digest(model)}", flush=True)


if __name__ == "__main__":
    main()
