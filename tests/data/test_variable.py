"""Variable-length data: natural paragraph lengths, padding collators, real labels, length histogram."""

from __future__ import annotations

import pytest

from turbotrain.data import stdlib_corpus, train_tokenizer
from turbotrain.data.variable import build_variable_length_data, length_histogram


def test_length_histogram_buckets():
    assert length_histogram([1, 8, 9, 16, 17, 100, 600]) == {"<=8": 2, "9-16": 2, "17-32": 1, "65-128": 1, ">512": 1}


@pytest.mark.parametrize("task", ["mlm", "cls"])
def test_paragraphs_keep_their_lengths_and_batches_are_padded(task):
    corpus = stdlib_corpus()
    data = build_variable_length_data(corpus, train_tokenizer(corpus, 2000), max_len=64, task=task)
    lengths = [len(ids) for ids in data.train["input_ids"][:200]]
    assert max(lengths) <= 64 and min(lengths) < 32 < max(lengths)
    batch = data.collator([data.train[i] for i in range(16)])
    assert batch["attention_mask"].shape == batch["input_ids"].shape and (batch["attention_mask"] == 0).any()
    if task == "cls":
        labels = data.train["labels"]
        assert batch["labels"].shape == (16,) and 0.1 < sum(labels) / len(labels) < 0.9  # both classes occur
