"""A tiny regression model that trains on the CPU in seconds, with gpujob's checkpoints.

Runs anywhere: under gpujob (GPUJOB_* variables set) or by hand (checkpoints in ./checkpoints).
Saves ``step-<N>/state.pt`` atomically with a completion marker, resumes from GPUJOB_RESUME,
and stops cleanly (after saving) when GPUJOB_STOP_FILE appears or SIGTERM arrives.
"""

import argparse
import json
import os
import signal
import time
from pathlib import Path

import torch

stop = {"flag": False}
signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))


def save(ckpt_dir: Path, step: int, state: dict) -> None:
    tmp = ckpt_dir / f".tmp-step-{step}"
    tmp.mkdir(parents=True, exist_ok=True)
    torch.save(state, tmp / "state.pt")
    (tmp / ".gpujob-complete").write_text("ok\n")
    final = ckpt_dir / f"step-{step}"
    tmp.rename(final)
    print(f"saved {final}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds per step (to make a long job)")
    args = ap.parse_args()

    torch.manual_seed(0)
    ckpt_dir = Path(os.environ.get("GPUJOB_CKPT_DIR", "checkpoints"))
    metrics = os.environ.get("GPUJOB_METRICS_FILE")
    stop_file = os.environ.get("GPUJOB_STOP_FILE")
    x = torch.randn(512, 8)
    y = x @ torch.arange(1.0, 9.0) + 0.1 * torch.randn(512)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    resume = os.environ.get("GPUJOB_RESUME")
    if resume:
        state = torch.load(Path(resume) / "state.pt")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        print(f"resumed from {resume} at step {start}", flush=True)
    for step in range(start + 1, args.steps + 1):
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.sleep:
            time.sleep(args.sleep)
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            if metrics:
                with open(metrics, "a") as f:
                    f.write(json.dumps({"t": time.time(), "step": step, "loss": loss.item()}) + "\n")
        requested = stop["flag"] or (stop_file and os.path.exists(stop_file))
        if step % args.save_every == 0 or step == args.steps or requested:
            save(ckpt_dir, step, {"model": model.state_dict(), "opt": opt.state_dict(), "step": step})
        if requested:
            print("stop requested: saved and exiting", flush=True)
            return
    print("done", flush=True)


if __name__ == "__main__":
    main()
