"""Held-out data with fixed masks, the unigram baseline, masked accuracy and the fill-mask probe rule."""

from __future__ import annotations

import pytest
import torch

from turbotrain.data.corpus import Corpus
from turbotrain.data.tokenizer import train_tokenizer
from turbotrain.pretrain.data import build_pretrain_data, unigram_accuracy
from turbotrain.pretrain.fill_mask_probes import choose_probes, first_sentence, make_probe
from turbotrain.pretrain.metrics import evaluate_masked

SENTENCES = [
    "Return the number of items in the list.",
    "Open the file and read its contents.",
    "This module provides functions for working with paths.",
    "x = f(y) + 1",
    "Short one.",
    "Raise an error when the value is negative, otherwise return it.",
]


@pytest.fixture(scope="module")
def tokenizer():
    corpus = Corpus("test", [s for _ in range(30) for s in SENTENCES] + [f"word{i} number {i}." for i in range(200)])
    return train_tokenizer(corpus, vocab_size=400, cache=False)


def test_probe_rule_is_deterministic_and_masks_one_token_word(tokenizer):
    assert make_probe("x = f(y) + 1", tokenizer) is None and make_probe("Short one.", tokenizer) is None
    probes = choose_probes(SENTENCES, tokenizer, 64, count=10)
    assert [p.text for p in probes] == [p.text for p in choose_probes(SENTENCES, tokenizer, 64, count=10)]
    for probe in probes:
        assert probe.text.count("<mask>") == 1 and len(probe.word) >= 4
        assert len(tokenizer.encode(" " + probe.word, add_special_tokens=False)) == 1
    assert choose_probes(SENTENCES, tokenizer, max_len=4) == []  # longer than the model's positions
    assert first_sentence("First one here.  Second\nline.") == "First one here."


def test_held_out_masks_are_fixed_and_the_baseline_counts_the_commonest_token(tokenizer):
    corpus = Corpus("test", [s for _ in range(20) for s in SENTENCES])
    a = build_pretrain_data(corpus, tokenizer, seq_len=32, batch_size=4, eval_fraction=0.25)
    b = build_pretrain_data(corpus, tokenizer, seq_len=32, batch_size=4, eval_fraction=0.25)
    assert all(torch.equal(x["labels"], y["labels"]) for x, y in zip(a.eval_batches, b.eval_batches))
    assert a.eval_masked_tokens > 0 and 0 <= a.unigram_top1 <= a.unigram_top5 <= 1
    batch = {"labels": torch.tensor([[7, -100, 7, 9, 5]])}
    assert unigram_accuracy([[7, 7, 7, 9, 9, 5, 1]], [batch], special_ids={1}) == (0.5, 1.0)


class _Oracle(torch.nn.Module):
    """Puts its highest logit on token 3 and its second on the true token: top-1 only where the label is 3."""

    def __init__(self, labels):
        super().__init__()
        self.labels, self.w = labels, torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask):
        logits = torch.zeros(*input_ids.shape, 10)
        logits.scatter_(-1, self.labels.clamp(min=0)[..., None], 5.0)
        logits[..., 3] = 10.0
        return type("Out", (), {"logits": logits})


def test_masked_accuracy_counts_only_masked_tokens():
    labels = torch.tensor([[3, -100, 4, 5]])
    batch = {"input_ids": torch.zeros(1, 4, dtype=torch.long), "attention_mask": torch.ones(1, 4), "labels": labels}
    held = evaluate_masked(_Oracle(labels), [batch])
    assert held.top1 == pytest.approx(1 / 3) and held.top5 == 1.0 and held.loss > 0
