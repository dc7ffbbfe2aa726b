"""Tiny, randomly initialised encoder-decoder LMs (T5, BART, Marian, Whisper), built from configs, no downloads."""

from __future__ import annotations

import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    MarianConfig,
    MarianMTModel,
    T5Config,
    T5ForConditionalGeneration,
    WhisperConfig,
    WhisperForConditionalGeneration,
)

VOCAB = 97  # odd on purpose
MEL_BINS, SOURCE_POSITIONS = 8, 16  # Whisper: 32 feature frames per example
# BART-like configs (BART, Marian, Whisper) name each side's sizes apart: 2 layers, 4 heads, FFN 64 on both
SIDES = {
    f"{side}_{size}": value
    for side in ("encoder", "decoder")
    for size, value in (("layers", 2), ("attention_heads", 4), ("ffn_dim", 64))
}
_BART_LIKE = dict(d_model=32, **SIDES, max_position_embeddings=64)
CONFIGS = {
    "t5": (
        T5Config,
        T5ForConditionalGeneration,
        dict(
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_decoder_layers=2,
            num_heads=4,
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
        ),
        dict(dropout_rate=0.0),
    ),
    "bart": (
        BartConfig,
        BartForConditionalGeneration,
        dict(_BART_LIKE, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2),
        dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0),
    ),
    "marian": (
        MarianConfig,
        MarianMTModel,
        dict(_BART_LIKE, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0),
        dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0),
    ),
    "whisper": (
        WhisperConfig,
        WhisperForConditionalGeneration,
        dict(
            num_mel_bins=MEL_BINS,
            d_model=32,
            **SIDES,
            max_source_positions=SOURCE_POSITIONS,
            max_target_positions=64,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=3,
            suppress_tokens=[],
            begin_suppress_tokens=[],
        ),
        dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0),
    ),
}
FAMILIES = sorted(CONFIGS)


def make(family: str, seed: int = 0, dropout: bool = True, dtype=torch.float32, **changes):
    """A tiny model of `family`; with `dropout` the config's own dropout (0.1) is kept; `changes` to its config."""
    config_class, model_class, sizes, no_dropout = CONFIGS[family]
    config = config_class(vocab_size=VOCAB, **{**sizes, **({} if dropout else no_dropout), **changes})
    torch.manual_seed(seed)
    return model_class(config).to(dtype)


def batch(family: str, rows: int, source_len: int, target_lengths: list[int], keep: float = 1.0, seed: int = 0):
    """Encoder inputs [rows, source_len] (Whisper: features [rows, MEL_BINS, 2 * SOURCE_POSITIONS]) and decoder
    labels padded with -100 to the longest of `target_lengths`, with about `keep` of the real targets kept."""
    generator = torch.Generator().manual_seed(seed)
    longest = max(target_lengths)
    labels = torch.randint(4, VOCAB, (rows, longest), generator=generator)
    real = torch.arange(longest)[None, :] < torch.tensor(target_lengths)[:, None]
    labels[~real | (torch.rand(rows, longest, generator=generator) >= keep)] = -100
    if family == "whisper":
        return {
            "input_features": torch.randn(rows, MEL_BINS, 2 * SOURCE_POSITIONS, generator=generator),
            "labels": labels,
        }
    input_ids = torch.randint(4, VOCAB, (rows, source_len), generator=generator)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}


def speech_like_examples(n: int = 40, seed: int = 0) -> list[dict]:
    """Random features and transcripts of 2..19 tokens (natural-looking length spread)."""
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(n):
        length = int(torch.randint(2, 20, (1,), generator=generator))
        examples.append(
            {
                "input_features": torch.randn(MEL_BINS, 2 * SOURCE_POSITIONS, generator=generator).numpy(),
                "labels": torch.randint(4, VOCAB, (length,), generator=generator).tolist(),
            }
        )
    return examples
