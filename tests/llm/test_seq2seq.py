"""`turbo(Seq2SeqTrainer)` with `turbo_arguments(Seq2SeqTrainingArguments)`: 10 steps give stock's losses."""

from __future__ import annotations

import torch
from datasets import Dataset
from transformers import BartConfig, BartForConditionalGeneration, Seq2SeqTrainer, Seq2SeqTrainingArguments

from tests.tiny_models import VOCAB
from tests.trainer_helpers import COMMON, assert_losses_close
from turbotrain import turbo, turbo_arguments


def bart():
    torch.manual_seed(0)
    config = BartConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        dropout=0.0,
        attention_dropout=0.0,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
    )
    return BartForConditionalGeneration(config)


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
