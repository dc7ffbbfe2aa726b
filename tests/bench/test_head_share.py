"""The head-share measurement: times are positive, the bounds follow from them, and the sparse head is
timed on the labelled rows only."""

from __future__ import annotations

import pytest

from tests import tiny_seq2seq
from turbotrain.bench.head_share import HeadShare, measure_head_share


def test_bounds_follow_from_the_times():
    share = HeadShare(step_ms=100.0, head_dense_ms=40.0, head_sparse_ms=10.0)
    assert share.share == pytest.approx(0.4)
    assert share.bound_sparse == pytest.approx(100 / 70)
    assert share.bound_free_head == pytest.approx(100 / 60)
    assert "at most 1.429x" in str(share)
    noisy = HeadShare(step_ms=10.0, head_dense_ms=12.0, head_sparse_ms=1.0)  # the head alone timed longer
    assert noisy.bound_sparse == noisy.bound_free_head == float("inf")  # no bound measured, never a negative one


def test_measures_a_seq2seq_model_and_runs_the_sparse_head_on_kept_rows():
    model = tiny_seq2seq.make("bart", dropout=False)
    batches = [tiny_seq2seq.batch("bart", 3, 7, [5, 2, 4], keep=0.6, seed=s) for s in range(2)]
    head_rows = []  # rows of every 2-d call of the head: the head-only timings (the step calls it in 3-d)
    model.get_output_embeddings().register_forward_pre_hook(
        lambda module, args: head_rows.append(args[0].shape[0]) if args[0].dim() == 2 else None
    )
    share = measure_head_share(model, batches, rounds=1, warmup=0)
    assert share.step_ms > 0 and share.head_dense_ms > 0 and share.head_sparse_ms > 0
    expected = []
    for inputs in batches:
        labels = inputs["labels"]
        expected += [labels.numel(), int((labels != -100).sum())]
    assert head_rows == expected and expected[1] < expected[0]
