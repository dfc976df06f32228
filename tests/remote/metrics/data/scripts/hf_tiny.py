"""A tiny HF Trainer run that never imports gpujob: prints dict lines and a tqdm bar, writes TensorBoard."""

import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=32))
data = [{"input_ids": torch.randint(0, 128, (16,)), "labels": torch.randint(0, 128, (16,))} for _ in range(64)]
os.environ.setdefault("TENSORBOARD_LOGGING_DIR", os.path.join("out", "runs", "hf"))
args = TrainingArguments(output_dir="out", max_steps=steps, per_device_train_batch_size=4, logging_steps=2,
                         eval_strategy="steps", eval_steps=steps // 2, per_device_eval_batch_size=8,
                         save_strategy="no", report_to=["tensorboard"], use_cpu=True,
                         disable_tqdm=False, dataloader_num_workers=0)
Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:16]).train()
