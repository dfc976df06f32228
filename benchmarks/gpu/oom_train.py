"""The OOM job of the GPU check: a plain PyTorch loop whose activation memory grows with the batch.

Under gpujob it honours GPUJOB_BATCH_DIVISOR through ``gpujob_runtime.split_batch``: the
per-device batch is divided, accumulation multiplied, so the effective batch stays the same.
On a GPU, ``--seq`` is chosen by the check (``--probe``) so that the full batch needs about
1.4x the free GPU memory: a real CUDA out-of-memory, and half the batch fits.

On a CPU (the check's dry run) there is no device memory to exhaust: when
GPUJOB_CHECK_OOM_ABOVE is set (the dry run sets it, nothing else does) a per-device batch above
it raises ``torch.OutOfMemoryError`` the way the CUDA allocator does, so the agent's detection
and the halving run for real.

    python oom_train.py --probe                 # JSON: bytes per token, fixed bytes, free memory
    python oom_train.py --batch-size 16 --seq 65536 --steps 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

try:
    import gpujob_runtime as gj  # the agent puts it on PYTHONPATH
except ImportError:
    from gpujob.usecases.init import load_runtime

    gj = load_runtime()


def model_for(width: int, layers: int, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    blocks = [torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
              for _ in range(layers)]
    return torch.nn.Sequential(*blocks).to(device=device, dtype=dtype)


def micro_step(model: torch.nn.Module, batch: int, seq: int, width: int, device: torch.device,
               dtype: torch.dtype) -> float:
    """Forward and backward of ``batch`` sequences of ``seq`` tokens; activations grow with batch x seq."""
    limit = os.environ.get("GPUJOB_CHECK_OOM_ABOVE")
    if limit and device.type == "cpu" and batch > int(limit):
        need = batch * seq * 4 * width * 4  # the first layer's hidden activations in float32
        raise torch.OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {need / 2**20:.2f} MiB (dry run on CPU: per-device batch "
            f"{batch} > GPUJOB_CHECK_OOM_ABOVE={limit})")
    x = torch.randn(batch, seq, width, device=device, dtype=dtype)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    return float(loss.detach())


def probe(width: int, layers: int, seq: int) -> dict:
    """Peak memory of one micro-step at batch 1 and 2: bytes per token, fixed bytes, free memory."""
    device, dtype = torch.device("cuda"), torch.bfloat16
    model = model_for(width, layers, device, dtype)
    peaks = []
    for batch in (1, 2):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        micro_step(model, batch, seq, width, device, dtype)
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
    per_sample = peaks[1] - peaks[0]
    del model
    torch.cuda.empty_cache()  # what this probe cached is free for the job
    free, total = torch.cuda.mem_get_info()
    return {"bytes_per_token": per_sample / seq, "fixed_bytes": peaks[0] - per_sample, "free_bytes": free,
            "total_bytes": total, "probe_seq": seq, "device": torch.cuda.get_device_name()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=16, help="per-device batch before GPUJOB_BATCH_DIVISOR")
    p.add_argument("--seq", type=int, default=256, help="tokens per sample")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=3, help="optimizer steps")
    p.add_argument("--probe", action="store_true", help="print the memory probe as JSON and exit")
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    if args.probe:
        if not cuda:
            raise SystemExit("--probe needs a CUDA device")
        print(json.dumps(probe(args.width, args.layers, args.seq)))
        return 0
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    per_device, accum = gj.split_batch(args.batch_size)
    config = {"attempt": gj.attempt(), "batch_divisor": gj.batch_divisor(), "per_device_batch": per_device,
              "grad_accum": accum, "effective_batch": per_device * accum, "seq": args.seq, "device": str(device)}
    print("[gpucheck] config " + json.dumps(config), flush=True)
    torch.manual_seed(0)
    model = model_for(args.width, args.layers, device, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(1, args.steps + 1):
        t0 = time.time()
        loss = 0.0
        for _ in range(accum):
            loss += micro_step(model, per_device, args.seq, args.width, device, dtype) / accum
        opt.step()
        opt.zero_grad(set_to_none=True)
        peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
        gj.report(step, loss=loss, effective_batch=per_device * accum, per_device_batch=per_device, grad_accum=accum,
                  max_memory_gib=peak, step_s=round(time.time() - t0, 3))
        print(f"[gpucheck] step {step} loss {loss:.4f} effective_batch {per_device * accum}"
              + (f" max_memory_gib {peak:.1f}" if peak is not None else ""), flush=True)
    print("[gpucheck] done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
