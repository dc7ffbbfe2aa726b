"""Preference pairs for the `dpo` workload: prompt, chosen and rejected texts of chosen token lengths.

Each pair's lengths are drawn uniformly (one seeded generator): a prompt of `prompt_tokens` (default
30-200) and two completions of `completion_tokens` each (default 20-120), as the issue's DPO shape asks.
Each text is a window of the built-in corpus's token stream (its paragraphs tokenized in order, reused
from the start when the windows run past its end), decoded back to text: TRL's `DPOTrainer` takes text
and tokenizes it itself (prompt, prompt + chosen, prompt + rejected), so a window's length after TRL's
tokenization can differ by a token or two where the byte-level BPE merges across a boundary, and TRL adds
the tokenizer's special tokens and an end-of-sequence token to each completion.
`length_summary` gives the token lengths TRL will see, for the report.
"""

from __future__ import annotations

import statistics

import torch
from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from turbotrain.data.long_rows import token_stream

PROMPT_TOKENS = (30, 200)
COMPLETION_TOKENS = (20, 120)


def pair_lengths(count: int, prompt: tuple[int, int], completion: tuple[int, int], seed: int) -> list[tuple]:
    """(prompt, chosen, rejected) token lengths of `count` pairs, each uniform in its inclusive range."""
    generator = torch.Generator().manual_seed(seed)

    def draw(bounds: tuple[int, int]) -> list[int]:
        return torch.randint(bounds[0], bounds[1] + 1, (count,), generator=generator).tolist()

    return list(zip(draw(prompt), draw(completion), draw(completion)))


def build_preference_pairs(
    tokenizer: PreTrainedTokenizerBase,
    count: int = 64,
    prompt_tokens: tuple[int, int] = PROMPT_TOKENS,
    completion_tokens: tuple[int, int] = COMPLETION_TOKENS,
    seed: int = 0,
) -> Dataset:
    """A Dataset of `prompt`, `chosen`, `rejected` strings (module docstring)."""
    lengths = pair_lengths(count, prompt_tokens, completion_tokens, seed)
    stream = token_stream(tokenizer, sum(sum(pair) for pair in lengths))
    start, columns = 0, {"prompt": [], "chosen": [], "rejected": []}
    for pair in lengths:
        for name, length in zip(columns, pair):
            window = [stream[(start + i) % len(stream)] for i in range(length)]
            columns[name].append(tokenizer.decode(window))
            start += length
    return Dataset.from_dict(columns)


def length_summary(tokenizer: PreTrainedTokenizerBase, pairs: Dataset) -> dict[str, dict[str, int]]:
    """Token lengths (without special tokens) of the pairs' prompts and completions: min, median, max."""

    def summary(texts: list[str]) -> dict[str, int]:
        lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]]
        return {"min": min(lengths), "median": int(statistics.median(lengths)), "max": max(lengths)}

    prompts, completions = list(pairs["prompt"]), list(pairs["chosen"]) + list(pairs["rejected"])
    return {"prompt": summary(prompts), "completion": summary(completions)}
