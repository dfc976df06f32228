"""Causal language model training with the Hugging Face Trainer on a jsonl corpus.

Data: jsonl lines ``{"text": ...}``. Texts are tokenized, joined with EOS and cut into
blocks of ``--block-size`` tokens (run_clm's group_texts): no padding, every token trains.
Model: ``--model NAME_OR_PATH`` (any causal LM; its tokenizer unless ``--tokenizer``), or by
default a tiny GPT-2 (2 layers, 64 wide) with a byte-level tokenizer built here, so it runs
offline on a laptop CPU in minutes.

Defaults for speed: bf16 where supported (fp16 + loss scaling otherwise, fp32 on CPU), TF32,
fused AdamW on CUDA, SDPA attention; gradient accumulation; ``--gradient-checkpointing`` and
``--compile`` optional. GPUJOB_BATCH_DIVISOR divides the per-device batch and multiplies
accumulation. Checkpoints go to GPUJOB_CKPT_DIR every ``--save-steps`` (newest GPUJOB_KEEP
kept); TensorBoard to GPUJOB_TB_DIR (one stable run folder across restarts). It resumes from
GPUJOB_RESUME (or the newest complete checkpoint) by itself. A stop request (GPUJOB_STOP_FILE
or SIGTERM) saves at the next step end and exits 0. Runs under torchrun too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from itertools import chain

try:
    import gpujob_runtime as gj  # on a gpujob instance the agent puts it on PYTHONPATH
except ImportError:  # elsewhere: the copy shipped with the gpujob package
    from gpujob.usecases.init import load_runtime

    gj = load_runtime()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="data/corpus.jsonl", help="training jsonl")
    p.add_argument("--text-field", default="text")
    p.add_argument("--model", default=None, help="HF model name or path; default: tiny local GPT-2")
    p.add_argument("--tokenizer", default=None, help="default: the model's, or a byte-level one")
    p.add_argument("--block-size", type=int, default=None, help="tokens per block (default 1024, tiny: 128)")
    p.add_argument("--batch-size", type=int, default=8, help="per-device batch before GPUJOB_BATCH_DIVISOR")
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--lr", type=float, default=None, help="default 3e-4 (tiny) or 5e-5 (--model)")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--warmup", type=float, default=0.05, help="warmup fraction of all steps")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--max-steps", type=int, default=-1, help="overrides --epochs when > 0")
    p.add_argument("--save-steps", type=int, default=500)
    p.add_argument("--logging-steps", type=int, default=10)
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default="auto")
    p.add_argument("--gradient-checkpointing", action="store_true", help="less memory, ~30%% slower")
    p.add_argument("--compile", action="store_true", help="torch.compile (first steps take minutes)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers (data is pre-tokenized)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--no-resume", action="store_true", help="ignore existing checkpoints")
    return p.parse_args(argv)


def byte_tokenizer():
    """A byte-level tokenizer (256 bytes + <|endoftext|>), built locally: no vocabulary file."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab["<|endoftext|>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    eos = "<|endoftext|>"
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, bos_token=eos, unk_token=eos,
                                   pad_token=eos, model_max_length=1 << 30)


def build_model_and_tokenizer(args: argparse.Namespace, block_size: int):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

    if args.model:
        tok = AutoTokenizer.from_pretrained(args.tokenizer or args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation="sdpa")
        return model, tok
    tok = AutoTokenizer.from_pretrained(args.tokenizer) if args.tokenizer else byte_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=block_size, n_embd=64, n_layer=2, n_head=2,
                        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id)
    return GPT2LMHeadModel(config), tok


def packed_dataset(path: str, text_field: str, tokenizer, block_size: int):
    """Tokenize, append EOS to each text, concatenate and cut into full blocks (labels = inputs)."""
    import datasets
    from datasets import load_dataset

    if not sys.stderr.isatty():
        datasets.disable_progress_bars()
    raw = load_dataset("json", data_files=path, split="train")
    if text_field not in raw.column_names:
        raise SystemExit(f"{path}: no {text_field!r} field (check it with `gpujob data check {path}`)")
    procs = min(8, os.cpu_count() or 1) if len(raw) > 50_000 else None
    eos = tokenizer.eos_token_id

    def tokenize(batch: dict) -> dict:
        ids = tokenizer(batch[text_field], add_special_tokens=False)["input_ids"]
        return {"input_ids": [x + [eos] for x in ids]}

    def group(batch: dict) -> dict:
        flat = list(chain.from_iterable(batch["input_ids"]))
        n = len(flat) // block_size * block_size
        blocks = [flat[i:i + block_size] for i in range(0, n, block_size)]
        return {"input_ids": blocks, "labels": [b[:] for b in blocks]}

    tokenized = raw.map(tokenize, batched=True, remove_columns=raw.column_names, num_proc=procs,
                        desc="tokenizing")
    packed = tokenized.map(group, batched=True, batch_size=1000, num_proc=procs, desc="packing")
    if len(packed) == 0:
        raise SystemExit(f"{path}: fewer than {block_size} tokens; lower --block-size")
    return packed


def precision(choice: str) -> dict:
    import torch

    cuda = torch.cuda.is_available()
    if choice == "fp32" or (choice == "auto" and not cuda):
        return {}
    if choice == "bf16" or (choice == "auto" and torch.cuda.is_bf16_supported()):
        return {"bf16": True}
    return {"fp16": True}


def training_arguments(**kw):
    """TrainingArguments from ``kw``, dropping what this transformers version lacks (4.46 .. 5.x)."""
    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    if "warmup_ratio" in names and "warmup_ratio" in kw:
        kw["warmup_steps"] = 0
    elif "warmup_ratio" in kw:
        kw["warmup_steps"] = kw.pop("warmup_ratio")  # 5.x: a float < 1 is a ratio
    if "gradient_checkpointing" in kw and "activation_checkpointing" in names:
        kw["activation_checkpointing"] = kw.pop("gradient_checkpointing")  # 5.x name
    dropped = sorted(k for k in kw if k not in names)
    return TrainingArguments(**{k: v for k, v in kw.items() if k in names}), dropped


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    from transformers import Trainer, default_data_collator, set_seed

    set_seed(args.seed)
    block_size = args.block_size or (1024 if args.model else 128)
    model, tokenizer = build_model_and_tokenizer(args, block_size)
    max_pos = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    if max_pos and block_size > max_pos:
        raise SystemExit(f"--block-size {block_size} exceeds the model's {max_pos} positions")
    train = packed_dataset(args.data, args.text_field, tokenizer, block_size)

    per_device, accum = gj.split_batch(args.batch_size, args.grad_accum)
    cuda = torch.cuda.is_available()
    tb = gj.tb_dir()
    os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(tb))  # transformers 5: one stable run folder
    report_to = []
    try:
        import tensorboard  # noqa: F401

        report_to = ["tensorboard"]
    except ImportError:
        pass
    targs, dropped = training_arguments(
        output_dir=str(gj.ckpt_dir()), logging_dir=str(tb), report_to=report_to,
        per_device_train_batch_size=per_device, gradient_accumulation_steps=accum,
        learning_rate=args.lr or (5e-5 if args.model else 3e-4), weight_decay=args.weight_decay,
        warmup_ratio=args.warmup, lr_scheduler_type="cosine", num_train_epochs=args.epochs,
        max_steps=args.max_steps, logging_steps=args.logging_steps, save_strategy="steps",
        save_steps=args.save_steps, save_total_limit=gj.keep_last() or None, seed=args.seed,
        optim="adamw_torch_fused" if cuda else "adamw_torch", torch_compile=args.compile,
        disable_tqdm=not sys.stderr.isatty(), dataloader_num_workers=args.workers,
        dataloader_persistent_workers=args.workers > 0, dataloader_pin_memory=cuda,
        **precision(args.precision),
        **({"gradient_checkpointing": True} if args.gradient_checkpointing else {}),
    )
    callback = gj.trainer_callback()
    trainer = Trainer(model=model, args=targs, train_dataset=train, data_collator=default_data_collator,
                      processing_class=tokenizer, callbacks=[callback])
    a = trainer.args
    config = {"per_device_batch": a.per_device_train_batch_size, "grad_accum": a.gradient_accumulation_steps,
              "world_size": a.world_size, "batch_divisor": gj.batch_divisor(), "block_size": block_size,
              "effective_batch": a.per_device_train_batch_size * a.gradient_accumulation_steps * a.world_size,
              "tokens_per_step": block_size * a.per_device_train_batch_size * a.gradient_accumulation_steps
              * a.world_size, "blocks": len(train), "precision": "bf16" if a.bf16 else "fp16" if a.fp16 else "fp32",
              "optim": str(getattr(a.optim, "value", a.optim)), "params": sum(p.numel() for p in model.parameters()), "ignored": dropped}
    if a.process_index == 0:
        print("[gpujob] config " + json.dumps(config), flush=True)

    resume = None if args.no_resume else gj.latest_checkpoint()
    if resume is not None and a.process_index == 0:
        print(f"[gpujob] resuming from {resume}", flush=True)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    if a.process_index == 0:
        if callback.stopped_early:
            print(f"[gpujob] stop requested: saved step {trainer.state.global_step}, exiting", flush=True)
        else:
            print(f"[gpujob] done: {trainer.state.global_step} steps; checkpoints in {a.output_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
