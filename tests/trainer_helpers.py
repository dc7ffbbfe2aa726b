"""Shared set-up for Trainer-level tests: a fixed pre-masked dataset and run helpers."""

from __future__ import annotations

import torch
from datasets import Dataset
from transformers import Trainer, TrainerCallback, TrainingArguments

from tests.tiny_models import VOCAB, make
from turbotrain import TurboTrainer, TurboTrainingArguments


def dataset(n: int = 48, seq_len: int = 37, keep: float = 0.15, seed: int = 0) -> Dataset:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, VOCAB, (n, seq_len), generator=generator)
    labels = input_ids.clone()
    labels[torch.rand(n, seq_len, generator=generator) >= keep] = -100
    labels[:, 0] = input_ids[:, 0]  # every row keeps at least one label
    return Dataset.from_dict({"input_ids": input_ids.tolist(), "labels": labels.tolist()})


COMMON = dict(per_device_train_batch_size=4, max_steps=10, logging_steps=1, report_to="none", save_strategy="no",
              seed=0, learning_rate=1e-3, disable_tqdm=True, dataloader_num_workers=0)


def train_losses(trainer) -> list[float]:
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def stock_trainer(family, tmp_path, model=None, train_dataset=None, **overrides):
    args = TrainingArguments(output_dir=str(tmp_path / "stock"), **{**COMMON, **overrides})
    return Trainer(model=model or make(family), args=args, train_dataset=train_dataset or dataset())


def turbo_trainer(family, tmp_path, model=None, train_dataset=None, **overrides):
    args = TurboTrainingArguments(output_dir=str(tmp_path / "turbo"), **{**COMMON, **overrides})
    return TurboTrainer(model=model or make(family), args=args, train_dataset=train_dataset or dataset())


def assert_losses_close(turbo: list[float], stock: list[float], rtol: float = 1e-4) -> None:
    assert len(turbo) == len(stock) and len(stock) > 0
    for step, (a, b) in enumerate(zip(turbo, stock), 1):
        assert abs(a - b) <= rtol * abs(b), f"step {step}: turbo {a} vs stock {b}"


class StepRecorder(TrainerCallback):
    def __init__(self):
        self.steps = []

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)
