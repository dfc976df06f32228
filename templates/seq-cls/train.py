"""Text classification fine-tuning in a plain PyTorch loop, resumable exactly.

Data: jsonl lines ``{"text": ..., "label": ...}`` (labels: strings or ints).
Model: ``--model NAME_OR_PATH`` (any Hugging Face sequence-classification checkpoint), or by
default a tiny Transformer encoder with a byte-level tokenizer built here (runs offline on a
laptop CPU in minutes: 2 on two busy cores).

What it does right: AMP (bf16 where supported, fp16 + GradScaler otherwise, fp32 on CPU),
TF32 and fused AdamW on CUDA, gradient clipping and accumulation, GPUJOB_BATCH_DIVISOR, eval
accuracy per epoch with the best checkpoint kept in ``<ckpt>/best``, and exact resume: model,
optimizer, scheduler, scaler, RNG (python, torch, cuda) and the data position (a seeded
permutation per epoch plus the number of batches already consumed). A stop request
(GPUJOB_STOP_FILE or SIGTERM) saves a checkpoint and exits 0. Runs under torchrun too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

try:
    import gpujob_runtime as gj  # on a gpujob instance the agent puts it on PYTHONPATH
except ImportError:  # elsewhere: the copy shipped with the gpujob package
    from gpujob.usecases.init import load_runtime

    gj = load_runtime()

PAD, CLS, OFFSET = 0, 1, 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", default="data/train.jsonl", help="training jsonl")
    p.add_argument("--eval", default="data/eval.jsonl", help="evaluation jsonl ('' to skip)")
    p.add_argument("--text-field", default="text")
    p.add_argument("--label-field", default="label")
    p.add_argument("--model", default=None, help="HF model name or path; default: tiny local model")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=16, help="per-device batch before GPUJOB_BATCH_DIVISOR")
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--lr", type=float, default=None, help="default 5e-4 (tiny model) or 2e-5 (--model)")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup", type=float, default=0.1, help="warmup fraction of all steps")
    p.add_argument("--clip", type=float, default=1.0, help="max grad norm (0: off)")
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default="auto")
    p.add_argument("--workers", type=int, default=None, help="DataLoader workers (default 2 on CUDA, 0 on CPU)")
    p.add_argument("--save-steps", type=int, default=200, help="also saved at each epoch end and on stop")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-resume", action="store_true", help="ignore existing checkpoints")
    p.add_argument("--step-delay", type=float, default=0.0, help=argparse.SUPPRESS)  # tests
    return p.parse_args(argv)


# --- data ----------------------------------------------------------------------------------

def read_jsonl(path: str, text_field: str, label_field: str) -> list[tuple[str, object]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            if text_field not in obj or label_field not in obj:
                raise SystemExit(f"{path}:{n}: needs fields {text_field!r} and {label_field!r} "
                                 f"(check the file with `gpujob data check {path}`)")
            rows.append((str(obj[text_field]), obj[label_field]))
    return rows


class ByteTokenizer:
    """UTF-8 bytes + 2 (0 = pad, 1 = CLS): no vocabulary, no download, deterministic."""

    vocab_size = 256 + OFFSET

    def __init__(self, max_length: int) -> None:
        self.max_length = max_length

    def __call__(self, texts: list[str]) -> dict[str, torch.Tensor]:
        seqs = [[CLS] + [b + OFFSET for b in t.encode("utf-8")[: self.max_length - 1]] for t in texts]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
        return {"input_ids": ids, "attention_mask": (ids != PAD).long()}


class TinyClassifier(nn.Module):
    """A 2-layer Transformer encoder over bytes, mean-pooled, for offline runs and tests."""

    def __init__(self, num_labels: int, max_length: int, d: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(ByteTokenizer.vocab_size, d, padding_idx=PAD)
        self.pos = nn.Embedding(max_length, d)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=2 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, num_labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.encoder(self.tok(input_ids) + self.pos(pos), src_key_padding_mask=attention_mask == 0)
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * m).sum(1) / m.sum(1).clamp(min=1))


def build_model(args: argparse.Namespace, labels: list) -> tuple[nn.Module, object, bool]:
    """(model, tokenizer, is_hf)."""
    if not args.model:
        return TinyClassifier(len(labels), args.max_length), ByteTokenizer(args.max_length), False
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    id2label = {i: str(label) for i, label in enumerate(labels)}
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model, num_labels=len(labels), id2label=id2label, label2id={v: k for k, v in id2label.items()})
    return model, tok, True


class Collate:
    """Tokenize a batch of (text, label) and pad it to its own longest sequence."""

    def __init__(self, tokenizer: object, is_hf: bool, label2id: dict, max_length: int) -> None:
        self.tokenizer, self.is_hf, self.label2id, self.max_length = tokenizer, is_hf, label2id, max_length

    def __call__(self, rows: list[tuple[str, object]]) -> dict[str, torch.Tensor]:
        texts = [r[0] for r in rows]
        if self.is_hf:
            enc = dict(self.tokenizer(texts, truncation=True, max_length=self.max_length, padding=True,
                                      return_tensors="pt"))
        else:
            enc = self.tokenizer(texts)
        enc["labels"] = torch.tensor([self.label2id[json.dumps(r[1])] for r in rows])
        return enc


def epoch_batches(n: int, global_batch: int, seed: int, epoch: int) -> list[list[int]]:
    """The epoch's batches of example indices: a permutation seeded by (seed, epoch)."""
    g = torch.Generator().manual_seed(seed * 100003 + epoch)
    perm = torch.randperm(n, generator=g).tolist()
    return [perm[i:i + global_batch] for i in range(0, n, global_batch)]


# --- training ------------------------------------------------------------------------------

def setup_distributed() -> tuple[torch.device, int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return device, gj.rank(), gj.world_size()


def pick_precision(choice: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype, or None for fp32."""
    if choice == "fp32" or (choice == "auto" and device.type != "cuda"):
        return None
    if choice == "bf16" or (choice == "auto" and torch.cuda.is_bf16_supported()):
        return torch.bfloat16
    return torch.float16


def forward(model: nn.Module, batch: dict, is_hf: bool) -> torch.Tensor:
    if is_hf:
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return model(batch["input_ids"], batch["attention_mask"])


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device, is_hf: bool,
             amp: torch.dtype | None) -> float:
    model.eval()
    correct = torch.zeros(2, device=device)
    for batch in loader:
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
            logits = forward(model, batch, is_hf)
        correct[0] += (logits.argmax(-1) == batch["labels"]).sum()
        correct[1] += batch["labels"].numel()
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(correct)
    model.train()
    return float(correct[0] / correct[1].clamp(min=1))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device, rank, world = setup_distributed()
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    random.seed(args.seed)
    torch.manual_seed(args.seed)

    train = read_jsonl(args.train, args.text_field, args.label_field)
    evalset = read_jsonl(args.eval, args.text_field, args.label_field) if args.eval else []
    labels = sorted({json.dumps(r[1]) for r in train}, key=str)
    label2id = {v: i for i, v in enumerate(labels)}
    evalset = [r for r in evalset if json.dumps(r[1]) in label2id]
    model, tokenizer, is_hf = build_model(args, [json.loads(v) for v in labels])
    model.to(device)

    per_device, accum = gj.split_batch(args.batch_size, args.grad_accum)
    global_batch = per_device * world
    micro_per_epoch = math.ceil(len(train) / global_batch)
    steps_per_epoch = math.ceil(micro_per_epoch / accum)
    total_steps = steps_per_epoch * args.epochs
    lr = args.lr if args.lr is not None else (2e-5 if is_hf else 5e-4)
    amp = pick_precision(args.precision, device)
    workers = args.workers if args.workers is not None else (2 if device.type == "cuda" else 0)
    config = {"per_device_batch": per_device, "grad_accum": accum, "world_size": world,
              "effective_batch": per_device * accum * world, "batch_divisor": gj.batch_divisor(),
              "steps_per_epoch": steps_per_epoch, "total_steps": total_steps, "lr": lr,
              "precision": str(amp).replace("torch.", "") if amp else "fp32", "device": str(device),
              "train_examples": len(train), "labels": len(labels)}
    if rank == 0:
        print("[gpujob] config " + json.dumps(config), flush=True)

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=lr, fused=device.type == "cuda")
    warmup = int(args.warmup * total_steps)

    def lr_lambda(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    scaler = torch.amp.GradScaler(device.type, enabled=amp == torch.float16)
    ddp_model = model
    if world > 1:
        ddp_model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)

    step, epoch, pos, best = 0, 0, 0, -1.0
    resume = None if args.no_resume else gj.latest_checkpoint()
    if resume is not None:
        state = gj.load(resume, map_location=device)
        if state.get("labels") != labels:
            raise SystemExit(f"checkpoint {resume} was trained on other labels; use --no-resume")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        step, epoch, pos, best = state["step"], state["epoch"], state["pos"], state["best"]
        gj.restore_rng(resume)
        if rank == 0:
            print(f"[gpujob] resumed from {resume} at step {step} (epoch {epoch}, batch {pos})", flush=True)

    def save(at_epoch: int, at_pos: int) -> None:
        gj.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "step": step,
                 "epoch": at_epoch, "pos": at_pos, "best": best, "labels": labels,
                 "args": vars(args)}, step)

    collate = Collate(tokenizer, is_hf, label2id, args.max_length)
    loader_kw = {"collate_fn": collate, "num_workers": workers, "pin_memory": device.type == "cuda",
                 "worker_init_fn": gj.worker_init_fn if workers else None}
    eval_loader = DataLoader(evalset[rank::world], batch_size=per_device * 2, **loader_kw) if evalset else None

    model.train()
    while epoch < args.epochs:
        batches = epoch_batches(len(train), global_batch, args.seed, epoch)
        mine = [b[rank * per_device:(rank + 1) * per_device] or b[:1] for b in batches]
        # A private generator: building the loader must not draw from the global RNG.
        loader = DataLoader(train, batch_sampler=mine[pos:], generator=torch.Generator().manual_seed(0), **loader_kw)
        micro_losses: list[torch.Tensor] = []
        for batch in loader:
            group_start = pos - pos % accum
            group = min(accum, micro_per_epoch - group_start)
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            last_micro = pos + 1 - group_start >= group
            sync = contextlib.nullcontext() if world == 1 or last_micro else ddp_model.no_sync()
            with sync:
                with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
                    logits = forward(ddp_model, batch, is_hf)
                    loss = nn.functional.cross_entropy(logits.float(), batch["labels"]) / group
                scaler.scale(loss).backward()
            micro_losses.append(loss.detach())
            pos += 1
            if not last_micro:
                continue
            scaler.unscale_(optimizer)
            gnorm = nn.utils.clip_grad_norm_(model.parameters(), args.clip) if args.clip > 0 else torch.zeros(())
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            step_loss = torch.stack(micro_losses).sum()
            if world > 1:
                torch.distributed.all_reduce(step_loss)
                step_loss /= world
            micro_losses = []
            gj.report(step=step, loss=float(step_loss), lr=scheduler.get_last_lr()[0],
                      grad_norm=float(gnorm), epoch=epoch + pos / micro_per_epoch)
            if args.step_delay:
                time.sleep(args.step_delay)
            stop = gj.should_stop()
            if stop or (args.save_steps and step % args.save_steps == 0 and pos < micro_per_epoch):
                save(epoch, pos)
            if stop:
                if rank == 0:
                    print(f"[gpujob] stop requested: saved step {step}, exiting", flush=True)
                return 0
        epoch, pos = epoch + 1, 0
        if eval_loader is not None:
            acc = evaluate(ddp_model, eval_loader, device, is_hf, amp)
            gj.report(step=step, eval_accuracy=acc, epoch=epoch)
            if rank == 0:
                print(f"[gpujob] epoch {epoch} step {step} eval_accuracy {acc:.4f}", flush=True)
            if acc > best:
                best = acc
                gj.save_best({"model": model.state_dict(), "labels": labels, "args": vars(args)}, step,
                             "eval_accuracy", acc)
        save(epoch, 0)
    if rank == 0:
        print(f"[gpujob] done: {step} steps, best eval_accuracy {best:.4f}", flush=True)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
