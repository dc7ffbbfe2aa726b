"""Kept rows chosen in the collator (passes/label_sparsity/host_rows.py): the model uses them instead of its
own `nonzero`, never sees the keys, gets the same loss and gradients, and the trainer adds them only for an
accelerator inside Trainer's loop (label sparsity's collator step, one of the steps `OptimizeReport.collator`
loops over)."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from tests.parity import assert_same, loss_and_grads
from tests.tiny_models import CAUSAL, FAMILIES, batch, make, padded_batch
from turbotrain import optimize
from turbotrain.backends.base import Backend
from turbotrain.passes import label_sparsity
from turbotrain.passes.label_sparsity import host_rows, labelled_rows
from turbotrain.passes.registry import StepPlace
from turbotrain.trainer import TurboMixin
from turbotrain.utils.batch_keys import HOST_ROWS_KEYS, LABEL_GRID, LABEL_ROWS, LABEL_TARGETS


def with_host_rows(family: str, inputs: dict) -> dict:
    return host_rows.HostRowsCollator(lambda features: dict(features), causal=family in CAUSAL)(inputs)


def test_wanted_only_off_the_cpu_inside_trainers_loop():
    assert not host_rows.wanted(StepPlace("cpu"))
    assert host_rows.wanted(StepPlace("cuda")) and host_rows.wanted(StepPlace(torch.device("cuda", 1)))
    assert host_rows.wanted(StepPlace("xpu")) and not host_rows.wanted(StepPlace("cuda", in_trainer_loop=False))


@pytest.mark.parametrize("family", ["gpt2", "roberta"])
def test_collator_adds_the_rows_the_model_would_choose(family):
    inputs = batch(3, 11, keep=0.4, seed=2)
    made = with_host_rows(family, dict(inputs))
    rows, targets = labelled_rows(inputs["labels"], family in CAUSAL)
    torch.testing.assert_close(made[LABEL_ROWS], rows, rtol=0, atol=0)
    torch.testing.assert_close(made[LABEL_TARGETS], targets, rtol=0, atol=0)
    assert made[LABEL_GRID].shape == (3, 11, 0) and made[LABEL_GRID].numel() == 0


@pytest.mark.parametrize("family", FAMILIES)
def test_model_uses_the_collators_rows_and_matches_stock(family, monkeypatch):
    stock = make(family, dropout=False)
    sparse = copy.deepcopy(stock)
    optimize(sparse, padding_free=False, embedding_grad=False)
    seen = []
    sparse.register_forward_pre_hook(lambda m, a, kw: seen.append(sorted(kw)), with_kwargs=True)
    inputs = batch(2, 9, keep=0.5, seed=4)
    expected = loss_and_grads(stock, inputs)
    given = with_host_rows(family, dict(inputs))

    def no_nonzero(*args, **kwargs):
        raise AssertionError("the model chose its rows itself")

    monkeypatch.setattr(label_sparsity, "labelled_rows", no_nonzero)
    got = loss_and_grads(sparse, given)
    assert_same(expected, got)
    assert all(key not in keys for keys in seen for key in HOST_ROWS_KEYS)  # hooks after it see no keys


def test_rows_for_other_labels_are_not_used(monkeypatch):
    stock = make("gpt2", dropout=False)
    sparse = copy.deepcopy(stock)
    optimize(sparse, padding_free=False, embedding_grad=False)
    inputs = batch(2, 9, keep=0.5, seed=4)
    stale = with_host_rows("gpt2", batch(2, 7, keep=0.5, seed=5))  # made for [2, 7] labels
    mixed = {**inputs, **{key: stale[key] for key in HOST_ROWS_KEYS}}
    calls = []
    real = label_sparsity.labelled_rows
    monkeypatch.setattr(label_sparsity, "labelled_rows", lambda *a: calls.append(1) or real(*a))
    assert_same(loss_and_grads(stock, inputs), loss_and_grads(sparse, mixed))
    assert calls == [1]  # the shapes disagreed: the model chose its own rows


def test_keys_are_taken_off_in_eval_mode_too():
    model = make("roberta", dropout=False)
    optimize(model, padding_free=False, embedding_grad=False)
    model.eval()
    seen = []
    model.register_forward_pre_hook(lambda m, a, kw: seen.append(sorted(kw)), with_kwargs=True)
    with torch.no_grad():
        out = model(**with_host_rows("roberta", batch(2, 9, keep=0.5)))
    assert out.logits.shape[:2] == (2, 9)  # eval: dense, full logits
    assert seen == [["input_ids", "labels"]]


def test_packed_batches_get_rows_after_packing():
    model = make("llama", dropout=False)
    report = optimize(model, embedding_grad=False)
    assert report.padding_free is not None
    made = report.collator(lambda features: padded_batch([6, 2, 9], keep=0.7, seed=3), StepPlace("cuda"))(None)
    rows, _ = labelled_rows(made["labels"], causal=True)  # the packed labels, first token of each sequence dropped
    torch.testing.assert_close(made[LABEL_ROWS], rows, rtol=0, atol=0)
    assert made[LABEL_GRID].shape[:2] == made["labels"].shape


class OwnLoop(Backend):
    name = "own-loop-test"
    owns_loop = True

    def training_loop(self, trainer):
        return lambda *args, **kwargs: None


def fake_trainer(device: str, backend: Backend, padding_free: bool = True):
    model = make("gpt2", dropout=False)
    report = optimize(model, padding_free=padding_free, embedding_grad=False, padding_free_with_dropout=True)
    return SimpleNamespace(
        turbo_report=report,
        data_collator=lambda f: f,
        args=SimpleNamespace(device=torch.device(device)),
        backend=backend,
    )


def test_trainer_adds_host_rows_only_on_an_accelerator_inside_trainers_loop():
    train_collator = TurboMixin._turbo_train_collator
    on_cpu = train_collator(fake_trainer("cpu", Backend()))
    assert not isinstance(on_cpu, host_rows.HostRowsCollator)  # the CPU: packing only, batches as before
    assert isinstance(train_collator(fake_trainer("cuda", Backend())), host_rows.HostRowsCollator)
    assert not isinstance(train_collator(fake_trainer("cuda", OwnLoop())), host_rows.HostRowsCollator)
    assert train_collator(fake_trainer("cpu", Backend(), padding_free=False)) is None
