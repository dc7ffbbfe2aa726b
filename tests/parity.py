"""Parity helpers shared by every pass and backend test: one step's loss and gradients, and their comparison
with per-dtype tolerances (fp32 tight, bf16/fp16 loose), as Liger-Kernel's tests compare a patched module
with the stock one."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


TOLERANCES = {
    torch.float32: Tolerance(rtol=1e-5, atol=1e-6),
    torch.bfloat16: Tolerance(rtol=5e-2, atol=5e-2),
    torch.float16: Tolerance(rtol=1e-2, atol=1e-2),
}

Step = tuple[torch.Tensor, dict[str, torch.Tensor | None]]


def loss_and_grads(model: torch.nn.Module, inputs: dict, seed: int = 7, **kwargs) -> Step:
    """One training-mode forward and backward: (loss, {parameter name: gradient or None}).

    The RNG is seeded first, so dropout draws the same masks in the stock and the rewritten run."""
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model(**inputs, **kwargs)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() if p.grad is not None else None for n, p in model.named_parameters()}
    return out.loss.detach(), grads


def assert_same(
    expected: Step, got: Step, dtype: torch.dtype = torch.float32, rtol: float | None = None, atol: float | None = None
) -> None:
    """Same loss and the same gradient for every parameter (None where stock has none), within tolerance."""
    tolerance = TOLERANCES[dtype]
    rtol = tolerance.rtol if rtol is None else rtol
    atol = tolerance.atol if atol is None else atol
    (loss_a, grads_a), (loss_b, grads_b) = expected, got
    torch.testing.assert_close(loss_b.float(), loss_a.float(), rtol=rtol, atol=atol, equal_nan=True)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        a, b = grads_a[name], grads_b[name]
        assert (a is None) == (b is None), name
        if a is not None:
            torch.testing.assert_close(b.float(), a.float(), rtol=rtol, atol=atol, equal_nan=True, msg=name)


def assert_same_relative_to_scale(expected: Step, got: Step, rtol: float = 1e-5) -> None:
    """Loss within rtol, and each gradient's largest difference within rtol of that tensor's largest value
    (for compiled graphs and chunked sums, whose float summation order differs everywhere). A NaN loss (no
    kept label) must be NaN in both, with gradients exactly equal (zero); sparse gradients compare dense."""
    (ref_loss, ref_grads), (loss, grads) = expected, got
    torch.testing.assert_close(loss.float(), ref_loss.float(), rtol=rtol, atol=0, equal_nan=True)
    assert ref_grads.keys() == grads.keys()
    for name, ref in ref_grads.items():
        value = grads[name]
        assert (ref is None) == (value is None), name
        if ref is not None:
            scale = ref.abs().max().item() if torch.isfinite(ref_loss) else 0.0
            torch.testing.assert_close(value.to_dense(), ref.to_dense(), rtol=0, atol=rtol * scale + 1e-8, msg=name)
