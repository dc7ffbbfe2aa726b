"""The fused optimizer makes the same update as Trainer's default AdamW, and is chosen per device."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.tiny_models import batch, make
from turbotrain import fused_adamw
from turbotrain.passes.fused_optimizer import has_fused_adamw, resolve_optim_name


def run_steps(model, optimizer, steps=5):
    model.train()
    for step in range(steps):
        optimizer.zero_grad()
        torch.manual_seed(step)
        model(**batch(3, 37, keep=0.3, seed=step)).loss.backward()
        optimizer.step()
    return model


def test_fused_adamw_matches_for_loop_adamw():
    reference = make("roberta")
    fused = copy.deepcopy(reference)
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    run_steps(reference, torch.optim.AdamW(reference.parameters(), foreach=False, **kw))
    run_steps(fused, fused_adamw(fused.parameters(), **kw))
    for (name, a), (_, b) in zip(reference.named_parameters(), fused.named_parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)


def test_fused_adamw_uses_fused_kernel_on_cpu():
    optimizer = fused_adamw(make("gpt2").parameters(), lr=1e-3)
    assert optimizer.defaults["fused"] is has_fused_adamw("cpu")


@pytest.mark.parametrize(
    "optim,fused,expected",
    [
        ("adamw_torch", True, "adamw_torch_fused"),
        ("adamw_torch_fused", True, "adamw_torch_fused"),
        ("adamw_ort_fused", True, "adamw_torch_fused"),
        ("adamw_torch", False, "adamw_torch"),
        ("sgd", True, "sgd"),
    ],
)
def test_resolve_optim_name_on_cpu(optim, fused, expected):
    assert has_fused_adamw("cpu")
    assert resolve_optim_name(optim, "cpu", fused) == expected


def test_device_without_fused_kernel_keeps_plain_adamw(monkeypatch):
    monkeypatch.setattr("turbotrain.passes.fused_optimizer.fused_adamw_devices", lambda: {"cuda"})
    assert resolve_optim_name("adamw_torch_fused", "cpu", True) == "adamw_torch"
