"""Encoder-decoder label sparsity (T5, BART, Marian, Whisper): the stock loss and every stock gradient,
with the decoder inputs built from the full labels, odd shapes, dropout on, and a batch with no kept label."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.parity import assert_same, loss_and_grads
from tests.tiny_models import as_user_subclass
from tests.tiny_seq2seq import FAMILIES, batch, make
from turbotrain import optimize
from turbotrain.passes.label_sparsity import find_head

SHAPES = [  # (rows, source length, decoder target lengths, share of real targets kept)
    (3, 37, [23, 5, 17], 0.3),
    (1, 1, [1], 1.0),
    (2, 9, [13, 13], 0.5),
]


def stock_and_sparse(family, **kwargs):
    stock = make(family, **kwargs)
    sparse = copy.deepcopy(stock)
    report = optimize(sparse, padding_free=False)
    assert report.label_sparsity is not None, f"label sparsity did not apply to {family}"
    return stock, sparse


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("rows,source_len,targets,keep", SHAPES)
def test_fp32_loss_and_grads_match_stock(family, rows, source_len, targets, keep):
    stock, sparse = stock_and_sparse(family)
    inputs = batch(family, rows, source_len, targets, keep=keep, seed=source_len)
    assert_same(loss_and_grads(stock, inputs), loss_and_grads(sparse, inputs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_with_no_kept_label_matches_stock(family):
    stock, sparse = stock_and_sparse(family)
    inputs = batch(family, 3, 37, [23, 5, 17], keep=0.0)
    stock_result, sparse_result = loss_and_grads(stock, inputs), loss_and_grads(sparse, inputs)
    assert torch.isnan(stock_result[0]) and torch.isnan(sparse_result[0])
    assert_same(stock_result, sparse_result, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_given_decoder_inputs_are_kept(family):
    """A collator that builds decoder_input_ids itself (DataCollatorForSeq2Seq with a model) is respected."""
    stock, sparse = stock_and_sparse(family)
    inputs = batch(family, 3, 11, [7, 3, 9], keep=0.6)
    inputs["decoder_input_ids"] = torch.randint(
        4, 97, inputs["labels"].shape, generator=torch.Generator().manual_seed(5)
    )
    assert_same(loss_and_grads(stock, inputs), loss_and_grads(sparse, inputs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_head_sees_only_kept_decoder_rows(family):
    _, sparse = stock_and_sparse(family)
    seen = []
    find_head(sparse).module.register_forward_hook(lambda m, a, out: seen.append(tuple(out.shape)))
    inputs = batch(family, 3, 37, [23, 5, 17], keep=0.5, seed=3)
    sparse.train()
    sparse(**inputs)
    assert seen[-1] == (int((inputs["labels"] != -100).sum()), 97)


@pytest.mark.parametrize("family", FAMILIES)
def test_eval_returns_full_logits(family):
    _, sparse = stock_and_sparse(family)
    sparse.eval()
    inputs = batch(family, 3, 37, [23, 5, 17], keep=0.5)
    with torch.no_grad():
        assert sparse(**inputs).logits.shape == (3, 23, 97)


def test_tied_output_embeddings_stay_tied():
    _, sparse = stock_and_sparse("bart")
    assert sparse.get_output_embeddings().weight is sparse.get_input_embeddings().weight


def test_a_users_subclass_of_whisper_gets_its_decoder_inputs_built():
    """Whisper has no prepare_decoder_input_ids_from_labels: the shift is found in its modeling module,
    through the class hierarchy, also for a subclass defined elsewhere."""
    stock = as_user_subclass(make("whisper"))
    sparse = copy.deepcopy(stock)
    assert optimize(sparse, padding_free=False).label_sparsity is not None
    inputs = batch("whisper", 2, 0, [9, 4], keep=0.7, seed=11)
    assert_same(loss_and_grads(stock, inputs), loss_and_grads(sparse, inputs), rtol=1e-5, atol=1e-6)


def test_labels_longer_than_whisper_accepts_raise_stocks_error():
    """Whisper refuses labels longer than max_target_positions; the sparse [K, 1] labels would slip past
    that check, so the pass steps aside and the stock error is what the user sees."""
    stock, sparse = stock_and_sparse("whisper")
    limit = stock.config.max_target_positions
    inputs = batch("whisper", 2, 0, [limit + 3, 5], keep=0.5, seed=3)
    for model in (stock, sparse):
        with pytest.raises(ValueError, match="cannot exceed the maximum allowed length"):
            model(**inputs)
