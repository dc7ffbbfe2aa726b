"""`turbo(Seq2SeqTrainer)` with `turbo_arguments(Seq2SeqTrainingArguments)`: 10 steps give stock's losses."""

from __future__ import annotations

import torch
from datasets import Dataset
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

from tests.tiny_seq2seq import VOCAB, make
from tests.trainer_helpers import COMMON, assert_losses_close
from turbotrain import turbo, turbo_arguments


def bart():
    return make("bart", dropout=False, encoder_layers=1, decoder_layers=1)


def pairs(n: int = 40) -> Dataset:
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(3, VOCAB, (n, 13), generator=generator)
    return Dataset.from_dict({"input_ids": source.tolist(), "labels": source[:, :9].flip(1).tolist()})


def test_seq2seq_trainer_golden_losses(tmp_path):
    losses = []
    for trainer_class, args_class in (
        (turbo(Seq2SeqTrainer), turbo_arguments(Seq2SeqTrainingArguments)),
        (Seq2SeqTrainer, Seq2SeqTrainingArguments),
    ):
        args = args_class(output_dir=str(tmp_path / trainer_class.__name__), **COMMON)
        trainer = trainer_class(model=bart(), args=args, train_dataset=pairs())
        trainer.train()
        losses.append([entry["loss"] for entry in trainer.state.log_history if "loss" in entry])
    assert_losses_close(*losses)
