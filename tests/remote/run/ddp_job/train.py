"""A tiny DDP job for the launcher tests: gloo on the CPU, rank-0 checkpoints, exact resume.

Each rank writes ``params-rank<R>.txt`` (a digest of its final parameters) into the job dir.
"""

import argparse
import hashlib
import os
import time

import gpujob_runtime as rt
import torch
import torch.distributed as dist


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--save-every", type=int, default=10)
    ap.add_argument("--sleep", type=float, default=0.0)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    start = 0
    resume = rt.latest_checkpoint()
    if resume:
        state = rt.load(resume)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        print(f"rank {rank}: resumed from {resume} at step {start}", flush=True)
    print(f"rank {rank}/{world} node {os.environ.get('GPUJOB_NODE_RANK')} starts at step {start}", flush=True)
    for step in range(start + 1, args.steps + 1):
        g = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(32, 8, generator=g)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % args.save_every == 0:
            rt.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, step)
            rt.report(step=step, loss=loss.item())
            dist.barrier()
        if args.sleep and not resume:  # slow until the kill; a resumed run only has to finish
            time.sleep(args.sleep)
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    with open(os.path.join(os.environ["GPUJOB_JOB_DIR"], f"params-rank{rank}.txt"), "w") as f:
        f.write(digest)
    print(f"rank {rank} done {digest[:12]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
