"""Prompts for the `grpo` workload: texts of drawn token lengths from the built-in corpus.

Each prompt's length is drawn uniformly in `prompt_tokens` (inclusive; one seeded generator) and the prompt
is the next window of that many tokens of the corpus's token stream (its paragraphs tokenized in order,
reused from the start when the windows run past its end), decoded back to text: TRL's `GRPOTrainer` takes
text and tokenizes it itself, so a prompt can come out a token or two longer or shorter where the
byte-level BPE merges across a window's edge.
"""

from __future__ import annotations

import torch
from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from turbotrain.data.long_rows import token_stream


def build_prompts(
    tokenizer: PreTrainedTokenizerBase, count: int, prompt_tokens: tuple[int, int], seed: int = 0
) -> Dataset:
    """A Dataset of `count` `prompt` strings (module docstring)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(prompt_tokens[0], prompt_tokens[1] + 1, (count,), generator=generator).tolist()
    stream = token_stream(tokenizer, sum(lengths))
    start, prompts = 0, []
    for length in lengths:
        prompts.append(tokenizer.decode([stream[(start + i) % len(stream)] for i in range(length)]))
        start += length
    return Dataset.from_dict({"prompt": prompts})
