"""Label sparsity gives the stock loss and every stock gradient, for each family, odd shapes included."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from tests.parity import assert_same, loss_and_grads
from tests.tiny_models import CAUSAL, FAMILIES, as_user_subclass, batch, make
from turbotrain import optimize
from turbotrain.passes.label_sparsity import find_head
from turbotrain.utils.warnings import TurbotrainWarning


def stock_and_sparse(family, dtype=torch.float32):
    stock = make(family, dtype=dtype)
    sparse = copy.deepcopy(stock)
    report = optimize(sparse, padding_free=False)
    assert report.label_sparsity is not None, f"label sparsity did not apply to {family}"
    return stock, sparse


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("shape,keep", [((3, 37), 0.15), ((2, 8), 1.0), ((1, 1), 1.0)])
def test_fp32_loss_and_grads_match_stock(family, shape, keep):
    stock, sparse = stock_and_sparse(family)
    inputs = batch(*shape, keep=keep, seed=shape[1])
    assert_same(loss_and_grads(stock, inputs), loss_and_grads(sparse, inputs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_batch_with_no_kept_label_matches_stock(family):
    stock, sparse = stock_and_sparse(family)
    inputs = batch(3, 37, keep=0.0)
    stock_result, sparse_result = loss_and_grads(stock, inputs), loss_and_grads(sparse, inputs)
    assert torch.isnan(stock_result[0]) and torch.isnan(sparse_result[0])
    assert_same(stock_result, sparse_result, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", sorted(CAUSAL))
def test_causal_num_items_in_batch_reduction_matches_stock(family):
    stock, sparse = stock_and_sparse(family)
    inputs = batch(3, 37, keep=0.5)
    n = torch.tensor(41)
    assert_same(
        loss_and_grads(stock, inputs, num_items_in_batch=n),
        loss_and_grads(sparse, inputs, num_items_in_batch=n),
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_bf16_matches_stock_loosely(family):
    stock, sparse = stock_and_sparse(family, dtype=torch.bfloat16)
    inputs = batch(3, 37, keep=0.3)
    assert_same(loss_and_grads(stock, inputs), loss_and_grads(sparse, inputs), rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_head_actually_sees_only_kept_rows(family):
    _, sparse = stock_and_sparse(family)
    head = find_head(sparse).module
    seen = []
    head.register_forward_hook(lambda m, a, out: seen.append(tuple(out.shape)))
    inputs = batch(3, 37, keep=0.2, seed=3)
    sparse.train()
    sparse(**inputs)
    targets = inputs["labels"][:, 1:] if family in CAUSAL else inputs["labels"]
    kept = int((targets != -100).sum())
    assert seen and seen[-1][0] == kept and len(seen[-1]) == 2


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_eval_returns_full_logits(family):
    _, sparse = stock_and_sparse(family)
    sparse.eval()
    inputs = batch(3, 37, keep=0.2)
    with torch.no_grad():
        out = sparse(**inputs)
    assert out.logits.shape[:2] == (3, 37)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "gpt2"])
def test_tied_embeddings_stay_tied(family):
    _, sparse = stock_and_sparse(family)
    assert sparse.get_output_embeddings().weight is sparse.get_input_embeddings().weight
    before = sum(p.numel() for p in sparse.parameters())
    loss_and_grads(sparse, batch(2, 9, keep=0.5))
    assert sum(p.numel() for p in sparse.parameters()) == before


def test_language_model_without_head_warns_once_and_stays_dense():
    class Headless(type(make("bert"))):
        def get_output_embeddings(self):
            return None

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = optimize(Headless(make("bert").config), padding_free=False)
        optimize(Headless(make("bert").config), padding_free=False)
    assert report.label_sparsity is None and report.skipped == ["label_sparsity"]
    assert sum(issubclass(w.category, TurbotrainWarning) for w in caught) == 1


def test_classifier_is_skipped_silently():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = optimize(make("bert", task="cls"), padding_free=False)
    # not in `skipped` either: that list is what the summary line calls "refused ... see the log above"
    assert report.label_sparsity is None and report.skipped == []
    assert not [w for w in caught if issubclass(w.category, TurbotrainWarning)]


def test_self_check_refuses_a_head_that_breaks_the_contract():
    """A model whose loss re-shifts the labels itself would give wrong numbers: the pass must refuse it."""
    model = make("bert")

    class ShiftsItself(type(model)):
        def forward(self, input_ids=None, labels=None, **kwargs):
            out = super().forward(input_ids=input_ids, **kwargs)
            logits = out.logits
            if labels is not None:
                out.loss = nn.functional.cross_entropy(
                    logits[..., :-1, :].reshape(-1, logits.shape[-1]), labels[..., 1:].reshape(-1)
                )
            return out

    model.__class__ = ShiftsItself
    with pytest.warns(TurbotrainWarning, match="label sparsity left"):
        report = optimize(model, padding_free=False)
    assert report.label_sparsity is None


def test_optimize_is_idempotent_and_undoable():
    model = make("roberta")
    first = optimize(model, padding_free=False)
    assert optimize(model) is first
    inputs = batch(2, 9, keep=0.5)
    model.train()
    first.undo()
    assert model(**inputs).logits.shape[:2] == (2, 9)


def test_a_users_subclass_of_a_causal_lm_gets_the_shift():
    stock = as_user_subclass(make("gpt2", dropout=False))
    sparse = copy.deepcopy(stock)
    assert optimize(sparse, padding_free=False).label_sparsity is not None
    inputs = batch(3, 37, keep=0.5)
    assert_same(loss_and_grads(stock, inputs), loss_and_grads(sparse, inputs), rtol=1e-5, atol=1e-6)
