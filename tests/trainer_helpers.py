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


SHORT_RUN = dict(  # 10 quiet steps, nothing saved, no worker processes
    max_steps=10,
    logging_steps=1,
    report_to="none",
    save_strategy="no",
    seed=0,
    learning_rate=1e-3,
    disable_tqdm=True,
    dataloader_num_workers=0,
)
COMMON = dict(SHORT_RUN, per_device_train_batch_size=4)


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


def assert_pass_trains_as_stock(tmp_path, build, pass_name: str, rtol: float = 1e-5):
    """Golden losses for one pass: stock `Trainer` and `TurboTrainer`, each on its own `build()` (the same seed's
    model), 6 steps of right-padded rows of varied length; `pass_name` must be installed. Returns both trainers."""
    common = dict(train_dataset=variable_length_dataset(n=24, max_len=37), learning_rate=5e-3, max_steps=6)
    stock = stock_trainer("llama", tmp_path, model=build(), **common)
    turbo = turbo_trainer("llama", tmp_path, model=build(), **common)
    for trainer in (stock, turbo):
        trainer.data_collator = RightPaddingCollator()
    assert pass_name in turbo.turbo_report.applied, turbo.turbo_report
    assert_losses_close(train_losses(turbo), train_losses(stock), rtol=rtol)
    return stock, turbo


class StepRecorder(TrainerCallback):
    def __init__(self):
        self.steps = []

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)


def variable_length_dataset(n: int = 48, task: str = "lm", seed: int = 0, max_len: int = 40) -> Dataset:
    """Sequences of uneven lengths (1 to max_len), labels per token (lm) or per sequence (cls)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len + 1, (n,), generator=generator).tolist()
    rows = {"input_ids": [], "labels": []}
    for length in lengths:
        ids = torch.randint(3, VOCAB, (length,), generator=generator)
        rows["input_ids"].append(ids.tolist())
        if task == "cls":
            rows["labels"].append(int(torch.randint(0, 3, (1,), generator=generator)))
        else:
            labels = ids.clone()
            labels[torch.rand(length, generator=generator) >= 0.3] = -100
            rows["labels"].append(labels.tolist())
    return Dataset.from_dict(rows)


class RightPaddingCollator:
    """Dynamic padding to the longest sequence of the batch, as DataCollatorWithPadding does."""

    def __init__(self, pad_token_id: int = 0):
        self.pad_token_id = pad_token_id

    def __call__(self, features):
        longest = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), longest), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        per_token = isinstance(features[0]["labels"], list)
        labels = torch.full_like(ids, -100) if per_token else torch.tensor([f["labels"] for f in features])
        for i, f in enumerate(features):
            n = len(f["input_ids"])
            ids[i, :n], mask[i, :n] = torch.tensor(f["input_ids"]), 1
            if per_token:
                labels[i, :n] = torch.tensor(f["labels"])
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}
