"""The idle job of the GPU check: takes GPU memory, reports one step, then waits doing nothing.

The agent's ``gpu_idle`` policy should see the GPU under its threshold with no step progress
and stop it; the job polls the stop file (through gpujob_runtime) and exits 0.
``--hold-mib 0`` (the CPU dry run: there is no GPU memory to take) skips importing torch.
"""

from __future__ import annotations

import argparse
import sys
import time

try:
    import gpujob_runtime as gj  # the agent puts it on PYTHONPATH
except ImportError:
    from gpujob.usecases.init import load_runtime

    gj = load_runtime()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hold-mib", type=int, default=1024, help="GPU memory to hold (the job shows in nvidia-smi)")
    args = p.parse_args()
    where = "nothing held"
    if args.hold_mib:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        held = torch.ones(args.hold_mib, 256, 1024, device=device)  # float32: 1 MiB per 256 x 1024
        where = f"{held.device}, holding {held.numel() * 4 / 2**20:.0f} MiB"
    gj.report(1, loss=1.0)
    print(f"[gpucheck] idle on {where}", flush=True)
    started = time.time()
    while not gj.should_stop():
        time.sleep(0.2)
    print(f"[gpucheck] stop requested after {time.time() - started:.1f} s idle", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
