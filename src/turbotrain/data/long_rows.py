"""Long-tailed rows for the `sft` workload's `--lengths long`: every token labelled, lengths up to 4,096.

Lengths are log-normal (median 256 tokens, sigma 1: mean ~420, 5% past 1,300, ~0.3% at the 4,096 cap, 16 at
least), as fine-tuning sets with a few long documents among many short turns are. Each row is a slice of the
built-in corpus's token stream (its paragraphs tokenized in order and concatenated, reused from the start
when a row runs past its end), labels = input_ids (every position scored: the dense case, where label
sparsity has nothing to remove and padding is all that packing takes away). Same two forms as `chat.py`:
`train` (input_ids, labels) and `trl_train` (input_ids, completion_mask of ones).
"""

from __future__ import annotations

import math

import torch
from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from turbotrain.data.chat import CompletionCollator, SftData
from turbotrain.data.corpus import stdlib_corpus

LONGEST = 4096
MEDIAN = 256
SHORTEST = 16


def long_tailed_lengths(count: int, longest: int = LONGEST, seed: int = 0) -> list[int]:
    """`count` log-normal lengths (median `MEDIAN`, sigma 1), clipped to [SHORTEST, longest]."""
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randn(count, generator=generator).mul(1.0).add(math.log(MEDIAN)).exp()
    return draws.round().clamp(SHORTEST, longest).long().tolist()


def build_long_rows(
    tokenizer: PreTrainedTokenizerBase, rows: int = 256, longest: int = LONGEST, seed: int = 0
) -> SftData:
    lengths = long_tailed_lengths(rows, longest, seed)
    stream = token_stream(tokenizer, sum(lengths))
    ids, start = [], 0
    for length in lengths:
        ids.append([stream[(start + i) % len(stream)] for i in range(length)])
        start += length
    train = Dataset.from_dict({"input_ids": ids, "labels": ids})
    trl_train = Dataset.from_dict({"input_ids": ids, "completion_mask": [[1] * len(row) for row in ids]})
    return SftData(
        train=train,
        trl_train=trl_train,
        collator=CompletionCollator(tokenizer.pad_token_id),
        num_tokens=sum(lengths),
        tokenizer=tokenizer,
    )


def token_stream(tokenizer: PreTrainedTokenizerBase, wanted: int) -> list[int]:
    """The corpus's paragraphs tokenized in order, until `wanted` tokens (or the whole corpus)."""
    stream: list[int] = []
    for paragraph in stdlib_corpus().paragraphs:
        stream.extend(tokenizer(paragraph, add_special_tokens=False, verbose=False)["input_ids"])
        if len(stream) >= wanted:
            break
    return stream
