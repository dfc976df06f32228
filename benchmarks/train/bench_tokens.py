"""Useful (non-pad) training tokens per second: the causal-lm template vs the seed-article recipe.

Both recipes train the same model with the same Trainer on the same jsonl corpus (varied
lengths), in one process, one after the other:

- ``packed`` (templates/causal-lm): texts joined with EOS and cut into full blocks; every
  token of every batch trains.
- ``padded`` (the seed article): each text truncated to the block size and padded per batch
  (DataCollatorForLanguageModeling), default TrainingArguments otherwise.

On CPU (default): a tiny GPT-2 (2 layers, 64 wide). On CUDA: a GPT-2-124M-shaped model in
bf16 (fp16 where bf16 is missing), fused AdamW, TF32, SDPA; it also reports MFU
(6·N + 12·L·d·T FLOPs per token, against ``--peak-tflops`` or the GPU's known dense bf16
peak). Prints a markdown table and writes ``--json`` if given.

``--recipes`` picks the rows: ``packed``, ``packed+compile`` (the same with ``torch.compile``)
and ``padded``; ``--compile`` is short for compiling the packed row.

    python benchmarks/train/bench_tokens.py                    # CPU, ~2 minutes on 2 cores
    python benchmarks/train/bench_tokens.py --max-steps 60     # CUDA
    python benchmarks/train/bench_tokens.py --recipes packed,packed+compile,padded --json cuda.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "causal-lm" / "train.py"
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "H800": 989.0, "A100": 312.0, "A800": 312.0, "L40S": 362.0,
               "4090": 165.0, "A10": 125.0, "L4": 121.0, "3090": 71.0, "V100": 125.0, "T4": 65.0}


def load_template():
    sys.path.insert(0, str(REPO / "templates" / "runtime"))
    spec = importlib.util.spec_from_file_location("causal_lm_template", TEMPLATE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def padded_dataset(path: str, tokenizer, block_size: int):
    """The seed article's data: one sample per text, truncated to block_size, no packing."""
    from datasets import load_dataset

    raw = load_dataset("json", data_files=path, split="train")
    return raw.map(lambda b: tokenizer(b["text"], truncation=True, max_length=block_size),
                   batched=True, remove_columns=raw.column_names)


class CountingCollator:
    """Wrap a collator; remember the useful (non-pad) token count of every batch it builds."""

    def __init__(self, inner) -> None:
        self.inner, self.counts = inner, []

    def __call__(self, features):
        batch = self.inner(features)
        mask = batch.get("attention_mask")
        self.counts.append(int(mask.sum()) if mask is not None else int(batch["input_ids"].numel()))
        return batch


def make_timer():
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        """Wall time of each step end (CUDA-synchronized), to measure after ``warmup`` steps."""

        def __init__(self) -> None:
            self.times: list[float] = []

        def on_step_end(self, args, state, control, **kw):
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.times.append(time.perf_counter())

    return Timer()


def model_for(args, tokenizer, cuda: bool):
    from transformers import GPT2Config, GPT2LMHeadModel

    if cuda and not args.tiny:
        cfg = GPT2Config(vocab_size=50304, n_positions=args.block_size, n_embd=768, n_layer=12, n_head=12,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    else:
        cfg = GPT2Config(vocab_size=len(tokenizer), n_positions=args.block_size, n_embd=64, n_layer=2, n_head=2,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    cfg._attn_implementation = "sdpa"
    return GPT2LMHeadModel(cfg), cfg


RECIPES = ("packed", "packed+compile", "padded")


def run_recipe(name: str, args, tpl, tokenizer, workdir: Path) -> dict:
    import torch
    from transformers import DataCollatorForLanguageModeling, Trainer, default_data_collator, set_seed

    cuda = torch.cuda.is_available()
    set_seed(0)
    model, cfg = model_for(args, tokenizer, cuda)
    compiled = name == "packed+compile" or (args.compile and name == "packed")
    if name.startswith("packed"):
        data = tpl.packed_dataset(args.data, "text", tokenizer, args.block_size)
        collator = CountingCollator(default_data_collator)
        extra = {"optim": "adamw_torch_fused" if cuda else "adamw_torch", **tpl.precision("auto")}
    else:
        data = padded_dataset(args.data, tokenizer, args.block_size)
        collator = CountingCollator(DataCollatorForLanguageModeling(tokenizer, mlm=False))
        extra = {"fp16": True} if cuda else {}  # the article: fp16=True on GPU, else defaults
    if args.repeat > 1:
        from datasets import concatenate_datasets

        data = concatenate_datasets([data] * args.repeat)
    if compiled:
        extra.update(torch_compile=True, torch_compile_backend=args.compile_backend)
    targs, _ = tpl.training_arguments(
        output_dir=str(workdir / name), report_to=[], per_device_train_batch_size=args.batch_size,
        max_steps=args.max_steps, num_train_epochs=1, save_strategy="no", logging_strategy="no",
        disable_tqdm=True, seed=0, **extra)
    timer = make_timer()
    trainer = Trainer(model=model, args=targs, train_dataset=data, data_collator=collator, callbacks=[timer])
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    if compiled and "OptimizedModule" not in type(trainer.model_wrapped).__name__:
        raise SystemExit(f"{name}: Trainer did not compile the model ({type(trainer.model_wrapped).__name__})")
    steps = len(timer.times)
    w = min(args.warmup, max(0, steps - 2))
    seconds = timer.times[-1] - timer.times[w]
    tokens = sum(collator.counts[w + 1:steps])           # batches of steps w+1 .. last
    slots = (steps - w - 1) * args.batch_size * args.block_size
    n_params = sum(p.numel() for p in model.parameters())
    row = {"recipe": name, "steps_timed": steps - w - 1, "useful_tokens": tokens, "seconds": round(seconds, 3),
           "useful_tokens_per_s": round(tokens / seconds, 1), "useful_fraction_of_block_slots": round(tokens / slots, 3),
           "params": n_params, "precision": "bf16" if targs.bf16 else "fp16" if targs.fp16 else "fp32",
           "compiled": compiled, "compile_backend": args.compile_backend if compiled else None,
           "attention": getattr(model.config, "_attn_implementation", None)}
    # 6 FLOPs per weight per token (forward + backward; the tied lm_head counts as a matmul),
    # position embeddings excluded, plus attention scores: 12 * layers * width * seq.
    n_matmul = n_params - model.transformer.wpe.weight.numel()
    flops_per_token = 6 * n_matmul + 12 * cfg.n_layer * cfg.n_embd * args.block_size
    peak = args.peak_tflops or (next((v for k, v in PEAK_TFLOPS.items() if k in torch.cuda.get_device_name()), None)
                                if cuda else None)
    row["tflops"] = round(flops_per_token * tokens / seconds / 1e12, 4 if not cuda else 1)
    row["mfu"] = round(row["tflops"] / peak, 3) if peak else None
    row["max_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1) if cuda else None
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(REPO / "examples" / "causal-lm" / "data" / "corpus.jsonl"))
    p.add_argument("--block-size", type=int, default=None, help="default 512 on CPU, 1024 on CUDA")
    p.add_argument("--batch-size", type=int, default=None, help="per device, both recipes (default 8 CPU, 32 CUDA)")
    p.add_argument("--max-steps", type=int, default=-1, help="default: one epoch on CPU, 60 on CUDA")
    p.add_argument("--repeat", type=int, default=1, help="repeat the corpus (longer runs)")
    p.add_argument("--warmup", type=int, default=None, help="steps not timed (default 3 CPU, 10 CUDA)")
    p.add_argument("--tiny", action="store_true", help="tiny model on CUDA too")
    p.add_argument("--recipes", default="packed,padded", help="comma list of " + ", ".join(RECIPES))
    p.add_argument("--compile", action="store_true", help="torch.compile the packed recipe")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend (eager: a quick CPU check)")
    p.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak for MFU")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    recipes = [r.strip() for r in args.recipes.split(",") if r.strip()]
    unknown = [r for r in recipes if r not in RECIPES]
    if unknown or not recipes:
        p.error(f"--recipes: unknown {unknown or recipes}; pick from {', '.join(RECIPES)}")

    import torch

    cuda = torch.cuda.is_available()
    args.block_size = args.block_size or (1024 if cuda else 512)
    args.batch_size = args.batch_size or (32 if cuda else 8)
    args.warmup = args.warmup if args.warmup is not None else (10 if cuda else 3)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        if args.max_steps < 0:
            args.max_steps = 60
            args.repeat = max(args.repeat, 40)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import tempfile

    import datasets

    datasets.disable_progress_bars()
    tpl = load_template()
    tokenizer = tpl.byte_tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run_recipe(name, args, tpl, tokenizer, Path(tmp)) for name in recipes]
    rate = {r["recipe"]: r["useful_tokens_per_s"] for r in rows}
    ratio = rate["packed"] / rate["padded"] if "packed" in rate and "padded" in rate else None
    device = torch.cuda.get_device_name() if cuda else f"CPU ({platform.processor() or platform.machine()}, " \
        f"{torch.get_num_threads()} threads)"
    import transformers

    env = {"device": device, "torch": torch.__version__, "transformers": transformers.__version__,
           "block_size": args.block_size, "batch_size": args.batch_size, "data": Path(args.data).name,
           "cuda": cuda, "tf32": bool(cuda and torch.backends.cuda.matmul.allow_tf32),
           "max_steps": args.max_steps, "warmup": args.warmup, "repeat": args.repeat}
    cols = ["recipe", "precision", "params", "steps_timed", "useful_tokens_per_s", "useful_fraction_of_block_slots",
            "tflops"]
    if cuda:
        cols += ["mfu", "max_memory_gib"]
    print(f"\n{env}\n")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c)) for c in cols) + " |")
    if ratio is not None:
        print(f"\npacked / padded useful tokens/s: {ratio:.2f}x (target >= 1.5x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"env": env, "rows": rows, "ratio": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
