"""Masked-LM training data: corpus paragraphs -> token blocks of a fixed length -> dynamic masking.

As Transformers' `run_mlm` example does: each paragraph is tokenized as `<s> ... </s>`, all are
concatenated, and the stream is cut into blocks of `seq_len` tokens (the tail that does not fill a
block is dropped: under one block). Masking happens per batch in `DataCollatorForLanguageModeling`
(15% of tokens; of those 80% <mask>, 10% random, 10% kept), so each epoch sees new masks.
"""

from __future__ import annotations

from dataclasses import dataclass

from datasets import Dataset
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from turbotrain.data.corpus import Corpus, CorpusError


@dataclass
class MaskedLMData:
    train: Dataset
    eval: Dataset | None
    collator: DataCollatorForLanguageModeling
    num_tokens: int


def token_blocks(corpus: Corpus, tokenizer: PreTrainedTokenizerBase, seq_len: int) -> list[list[int]]:
    encodings = tokenizer.backend_tokenizer.encode_batch(corpus.paragraphs)
    stream = [token for encoding in encodings for token in encoding.ids]
    return [stream[i : i + seq_len] for i in range(0, len(stream) - seq_len + 1, seq_len)]


def build_mlm_data(
    corpus: Corpus,
    tokenizer: PreTrainedTokenizerBase,
    seq_len: int = 128,
    eval_fraction: float = 0.02,
    mlm_probability: float = 0.15,
    seed: int = 0,
) -> MaskedLMData:
    """Blocks of `seq_len` tokens, a held-out share for evaluation, and the masking collator."""
    blocks = token_blocks(corpus, tokenizer, seq_len)
    if len(blocks) < 2:
        raise CorpusError(
            f"the corpus '{corpus.name}' gives {len(blocks)} block(s) of {seq_len} tokens; "
            "give more text or a shorter --seq-len"
        )
    dataset = Dataset.from_dict({"input_ids": blocks}).shuffle(seed=seed)
    num_eval = max(1, int(len(blocks) * eval_fraction)) if eval_fraction > 0 else 0
    train = dataset.select(range(num_eval, len(blocks)))
    held_out = dataset.select(range(num_eval)) if num_eval else None
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=mlm_probability)
    return MaskedLMData(train=train, eval=held_out, collator=collator, num_tokens=len(blocks) * seq_len)
