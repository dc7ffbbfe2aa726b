"""The check every model pass runs once at install: stock and rewritten forward on the same small batch.

`compare_losses(model, stock, rewritten, what)` runs both callables (each returns the model's output)
in eval mode without gradients, restores the training mode, and returns None when the losses agree
(1e-4 relative in fp32, 2e-2 otherwise) or a one-line description of what went wrong. It never
raises: a pass that fails its check is left out with a warning, training goes on.
`check_batch(model, lengths, ...)` is `modeling.synthetic_batch`, or None with the reason where the model's
inputs cannot be synthesised (a speech encoder's feature layout this cannot tell): the check then fails.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from turbotrain import modeling
from turbotrain.utils.mode import training_mode


def check_batch(model: nn.Module, lengths: list[int], **kwargs) -> tuple[dict | None, str | None]:
    """(`modeling.synthetic_batch(model, lengths, **kwargs)`, None), or (None, why it cannot be made)."""
    try:
        return modeling.synthetic_batch(model, lengths, **kwargs), None
    except Exception as error:  # the check must never take training down with it
        return None, f"no synthetic batch to check it on ({type(error).__name__}: {error})"


def compare_losses(model: nn.Module, stock: Callable, rewritten: Callable, what: str) -> str | None:
    try:
        with training_mode(model, False), torch.no_grad():
            expected, got = stock().loss, rewritten().loss
    except Exception as error:  # the check must never take training down with it
        return f"the {what} forward raised {type(error).__name__}: {error}"
    if expected is None or got is None:
        return "the model returned no loss for labels"
    tolerance = 1e-4 if expected.dtype == torch.float32 else 2e-2
    if not torch.allclose(got.float(), expected.float(), rtol=tolerance, atol=tolerance):
        return f"{what} loss {got.item():.6g} differs from stock loss {expected.item():.6g}"
    return None
