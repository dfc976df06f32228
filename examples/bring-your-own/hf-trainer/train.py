"""An ordinary Hugging Face Trainer script, as users bring it: no gpujob import.

A tiny GPT-2 built from a config (no hub download) learns synthetic token sequences
(no tokenizer). It takes ``--resume_from_checkpoint`` like the transformers examples do,
logs to stdout and to TensorBoard, and trains in a few seconds on a CPU.

    python train.py --output_dir out --max_steps 40 --save_steps 10
    python train.py --output_dir out --max_steps 80 --resume_from_checkpoint out/checkpoint-40
"""

import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class SyntheticTokens(torch.utils.data.Dataset):
    """Repeating patterns of token ids: learnable, deterministic, no tokenizer needed."""

    def __init__(self, n: int, length: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        starts = torch.randint(0, vocab, (n, 1), generator=g)
        strides = torch.randint(1, 4, (n, 1), generator=g)
        self.ids = (starts + strides * torch.arange(length)) % vocab

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Slow(TrainerCallback):
    """--step_seconds: pretend each step is a real one (to watch a run, or stop it mid-way)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--output_dir", default="out")
    ap.add_argument("--max_steps", type=int, default=40)
    ap.add_argument("--save_steps", type=int, default=10)
    ap.add_argument("--logging_steps", type=int, default=2)
    ap.add_argument("--learning_rate", type=float, default=3e-3)
    ap.add_argument("--resume_from_checkpoint", default=None)
    ap.add_argument("--step_seconds", type=float, default=0.0)
    args = ap.parse_args()

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        save_steps=args.save_steps,
        logging_steps=args.logging_steps,
        learning_rate=args.learning_rate,
        per_device_train_batch_size=8,
        report_to=["tensorboard"],
        use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=False,
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=SyntheticTokens(512, 16, 64),
                      callbacks=[Slow(args.step_seconds)] if args.step_seconds else [])
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    print(f"finished at step {trainer.state.global_step}", flush=True)


if __name__ == "__main__":
    main()
