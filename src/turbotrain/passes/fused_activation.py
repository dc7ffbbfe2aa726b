"""Fused activation: Transformers' tanh-approximated GELU written as ~8 elementwise ops -> one kernel.

GPT-2, GPT-J, CodeGen, BLOOM-style configs (`activation_function="gelu_new"` / `"gelu_fast"`) build
`NewGELUActivation` / `FastGELUActivation`, which compute 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
op by op: every op writes a tensor of the MLP's width, and autograd saves and replays each one.
`torch.nn.functional.gelu(x, approximate="tanh")` is the same formula in one kernel (forward and
backward). Measured on 2 cores of an AMD EPYC, [16, 128, 1024] fp32 forward + backward: 156-160 ms op
by op vs 24 ms fused, i.e. ~0.55 s of a GPT-2 h256 L4 step (vocab 50,257: ~7%).

Exact: the same function; the results differ only in float rounding (fp32: 2.4e-7 absolute on
N(0, 1) inputs; loss and gradients within 1e-6 relative, tests/passes/test_fused_activation.py). In
bf16 the fused kernel computes in fp32 inside and rounds once, where the op-by-op form rounds after
every op: slightly more accurate, so not bit-equal to stock bf16.

How: each such activation module is replaced in its parent by `FusedGELUTanh` (no parameters, so
state dicts, `save_pretrained` output and the config are unchanged); `remove()` puts the originals back.
At install, the two are compared on a small random tensor; a mismatch leaves the model as it was
(one warning).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import FastGELUActivation, NewGELUActivation

from turbotrain.passes.registry import PassOptions, option, register_pass
from turbotrain.passes.self_check import never_raises
from turbotrain.utils.warnings import warn_once

TANH_GELUS = (NewGELUActivation, FastGELUActivation)


class FusedGELUTanh(nn.Module):
    """GELU with the tanh approximation in one kernel (what `NewGELUActivation` computes op by op)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


class FusedActivation:
    """The installed pass: where each activation was replaced, so `remove()` can put it back."""

    def __init__(self, replaced: list[tuple[nn.Module, str, nn.Module]]):
        self.replaced = replaced

    def remove(self) -> None:
        for parent, name, original in self.replaced:
            setattr(parent, name, original)
        self.replaced = []


@never_raises
def _mismatch(original: nn.Module) -> str | None:
    """None where `original` computes the fused kernel's function on a small random tensor, else what differs."""
    x = torch.randn(64, 97, generator=torch.Generator().manual_seed(0)) * 3
    got, expected = original(x), F.gelu(x, approximate="tanh")
    if got.shape != expected.shape or not torch.allclose(got, expected, rtol=1e-5, atol=1e-6):
        return "its GELU does not match the fused kernel"
    return None


def _targets(model: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    return [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) in TANH_GELUS
    ]


def has_tanh_gelu(model: nn.Module) -> bool:
    return bool(_targets(model))


def apply_fused_activation(model: nn.Module) -> FusedActivation | None:
    """Replace the model's op-by-op tanh GELUs with the fused kernel; None if it has none (or they differ)."""
    targets = _targets(model)
    if not targets:
        return None
    problem = next(filter(None, (_mismatch(child) for _, _, child in targets)), None)
    if problem is not None:
        warn_once(f"turbotrain: fused_activation is off for this model: {problem}")
        return None
    fused = FusedGELUTanh()
    for parent, name, _ in targets:
        setattr(parent, name, fused)
    return FusedActivation(targets)


@register_pass(
    order=50,
    install=lambda model, setup: apply_fused_activation(model),
    refused_for=has_tanh_gelu,  # no tanh GELU: nothing to do
)
@dataclass(frozen=True)
class FusedActivationOptions(PassOptions):
    """Run Transformers' op-by-op tanh GELU (gelu_new, gelu_fast: GPT-2 and kin) as one fused kernel (exact
    within float rounding; passes/fused_activation.py)."""

    fused_activation: bool = option(True)
