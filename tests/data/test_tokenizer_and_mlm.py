"""The tokenizer is RoBERTa-shaped and round-trips; the MLM data masks ~15% per batch."""

from __future__ import annotations

import pytest

from turbotrain.data import CorpusError, build_mlm_data, stdlib_corpus, train_tokenizer
from turbotrain.data.corpus import Corpus


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(stdlib_corpus(), 2000)


def test_special_tokens_are_robertas(tokenizer):
    assert [tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.mask_token_id] == [
        0,
        1,
        2,
        4,
    ]
    assert len(tokenizer) == 2000


def test_round_trip_and_mask_token_takes_the_space(tokenizer):
    text = "Return the value of the attribute."
    assert tokenizer.decode(tokenizer(text).input_ids, skip_special_tokens=True) == text
    ids = tokenizer("The <mask> module").input_ids
    assert ids[0] == 0 and ids[-1] == 2 and 4 in ids and len(ids) == len(tokenizer("The x module").input_ids)


def test_tokenizer_is_cached_and_identical(tokenizer):
    again = train_tokenizer(stdlib_corpus(), 2000)
    assert again.get_vocab() == tokenizer.get_vocab()


def test_too_small_vocab_is_rejected():
    with pytest.raises(ValueError, match="at least 300"):
        train_tokenizer(stdlib_corpus(), 100)


def test_mlm_blocks_and_masking(tokenizer):
    data = build_mlm_data(stdlib_corpus(), tokenizer, seq_len=64)
    assert all(len(row["input_ids"]) == 64 for row in data.train.select(range(10)))
    batch = data.collator([data.train[i] for i in range(32)])
    share = (batch["labels"] != -100).float().mean().item()
    assert batch["input_ids"].shape == (32, 64) and 0.10 < share < 0.20


def test_too_little_text_is_a_clear_error(tokenizer):
    with pytest.raises(CorpusError, match="block"):
        build_mlm_data(Corpus("tiny", ["A single short paragraph of text that is not enough."]), tokenizer, seq_len=128)
