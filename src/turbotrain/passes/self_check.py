"""The check every model pass runs once at install: stock and rewritten forward on the same small batch.

`compare_losses(model, stock, rewritten, what)` runs both callables (each returns the model's output) in eval mode
without gradients, and returns None when the losses agree (1e-4 relative in fp32, 2e-2 otherwise) or a one-line
problem. `check_under_run_precision` runs them as the run will: under its autocast (`RunPrecision`, which
TurboTrainer sets around the install), with gradients into `.grad` (put back after), and also refuses NaN or inf
gradients where stock's are finite. `check_batch(model, lengths, ...)` is `modeling.synthetic_batch`, or None and
why (a speech encoder's feature layout): the check then fails. `never_raises`, on every pass's install check: an
exception comes back as the problem (whatever the model returns), and the pass steps aside with a warning;
inside `forward_raises(what)` it comes back as "the {what} raised {type}: {error}".
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from turbotrain import modeling
from turbotrain.utils.mode import training_mode


def never_raises(check: Callable[..., str | None]) -> Callable[..., str | None]:
    """`check` (returns a one-line problem, or None) with any exception it raises returned as the problem: the
    check must never take training down with it, whatever the model's outputs look like."""

    @functools.wraps(check)
    def guarded(*args, **kwargs) -> str | None:
        try:
            return check(*args, **kwargs)
        except _Raised as raised:
            return str(raised)
        except Exception as error:
            return f"the check could not compare the outputs ({type(error).__name__}: {_first_line(error)})"

    return guarded


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [""])[0]


class _Raised(Exception):
    """An exception of a check's forward, worded as the check's problem (`never_raises` returns it)."""


@contextlib.contextmanager
def forward_raises(what: str):
    try:
        yield
    except Exception as error:
        raise _Raised(f"the {what} raised {type(error).__name__}: {error}") from error


def check_batch(model: nn.Module, lengths: list[int], **kwargs) -> tuple[dict | None, str | None]:
    """(`modeling.synthetic_batch(model, lengths, **kwargs)`, None), or (None, why it cannot be made)."""
    try:
        return modeling.synthetic_batch(model, lengths, **kwargs), None
    except Exception as error:  # the check must never take training down with it
        return None, f"no synthetic batch to check it on ({type(error).__name__}: {error})"


@never_raises
def compare_losses(model: nn.Module, stock: Callable, rewritten: Callable, what: str) -> str | None:
    with forward_raises(f"{what} forward"), training_mode(model, False), torch.no_grad():
        expected, got = stock().loss, rewritten().loss
    if expected is None or got is None:
        return "the model returned no loss for labels"
    tolerance = 1e-4 if expected.dtype == torch.float32 else 2e-2
    if not torch.allclose(got.float(), expected.float(), rtol=tolerance, atol=tolerance):
        return f"{what} loss {got.item():.6g} differs from stock loss {expected.item():.6g}"
    return None


@dataclass(frozen=True)
class RunPrecision:
    """How the run computes: the device type its autocast applies to, and the autocast dtype (None: off)."""

    device_type: str = "cpu"
    autocast_dtype: torch.dtype | None = None

    @classmethod
    def of_arguments(cls, args) -> RunPrecision:
        """Trainer's own rule: `bf16=True` / `fp16=True` run the forward under autocast on the run's device."""
        dtype = (
            torch.bfloat16 if getattr(args, "bf16", False) else torch.float16 if getattr(args, "fp16", False) else None
        )
        return cls(torch.device(args.device).type, dtype)

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)


_RUN_PRECISION: contextvars.ContextVar[RunPrecision | None] = contextvars.ContextVar(
    "turbotrain_run_precision", default=None
)


@contextlib.contextmanager
def run_precision(precision: RunPrecision):
    """The precision self-checks inside this block run under (TurboTrainer wraps its install in it)."""
    token = _RUN_PRECISION.set(precision)
    try:
        yield precision
    finally:
        _RUN_PRECISION.reset(token)


def current_precision(model: nn.Module) -> RunPrecision:
    """The run's precision if one was set, else the model's own device without autocast."""
    given = _RUN_PRECISION.get()
    if given is not None:
        return given
    first = next(model.parameters(), None)
    return RunPrecision(first.device.type if first is not None else "cpu", None)


@never_raises
def check_under_run_precision(model: nn.Module, stock: Callable, rewritten: Callable, what: str) -> str | None:
    """Loss parity (1e-4 relative in fp32, 2e-2 under a half-precision autocast or model) and finite gradients of
    `rewritten` against `stock`, as the run computes (module docstring)."""
    precision = current_precision(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    saved = [p.grad for p in trainable]
    try:
        with forward_raises(f"{what} forward or backward"), training_mode(model, False):
            expected, stock_bad = _loss_and_bad_gradients(stock, trainable, precision)
            got, bad = _loss_and_bad_gradients(rewritten, trainable, precision)
    finally:
        for parameter, grad in zip(trainable, saved):
            parameter.grad = grad
    if expected is None or got is None:
        return "the model returned no loss for labels"
    half = precision.autocast_dtype is not None or expected.dtype != torch.float32
    tolerance = 2e-2 if half else 1e-4
    if not torch.allclose(got.float(), expected.float(), rtol=tolerance, atol=tolerance, equal_nan=True):
        return f"{what} loss {got.item():.6g} differs from stock loss {expected.item():.6g}{_under(precision)}"
    broken = sorted(bad - stock_bad)
    if broken:
        return f"{what} gives NaN or inf gradients{_under(precision)} where stock's are finite ({len(broken)} tensors)"
    return None


def check_forced(model: nn.Module, forced: Callable, lengths: list[int], what: str, **batch) -> str | None:
    """`check_under_run_precision` on a synthetic batch of `lengths` (`batch`: its other arguments), the rewritten
    call inside `forced()`: the installed pass's context in which it takes every call, however small."""
    inputs, problem = check_batch(model, lengths, **batch)
    if problem is not None:
        return problem

    def rewritten():
        with forced():
            return model(**inputs)

    return check_under_run_precision(model, lambda: model(**inputs), rewritten, what)


def _loss_and_bad_gradients(call: Callable, trainable: list, precision: RunPrecision):
    """(loss, indices of `trainable` whose gradient holds NaN or inf) of one forward under the run's autocast
    and its backward; parameters' `.grad` are cleared before and left set (the caller puts them back)."""
    for parameter in trainable:
        parameter.grad = None
    with precision.autocast():
        loss = call().loss
    if loss is None:
        return None, set()
    if loss.requires_grad:
        loss.backward()
    grads = [(i, p.grad) for i, p in enumerate(trainable) if p.grad is not None]
    if not grads:
        return loss.detach(), set()
    # a tensor's fp32 norm is NaN or inf iff it holds a NaN or an inf (or values past ~1e19): one fused pass, one read
    from turbotrain.boundaries.torch_boundary import norms_fp32

    norms = norms_fp32([g for _, g in grads])
    finite = torch.isfinite(torch.stack([n.to(norms[0].device) for n in norms])).tolist()
    return loss.detach(), {i for (i, _), ok in zip(grads, finite) if not ok}


def _under(precision: RunPrecision) -> str:
    if precision.autocast_dtype is None:
        return ""
    return f" under {str(precision.autocast_dtype).removeprefix('torch.')} autocast on {precision.device_type}"
