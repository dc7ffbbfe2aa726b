"""`turbotrain.compile(module, backend=...)`: any `nn.Module`'s training step on a turbotrain backend.

For custom loops outside Trainer (diffusers' `train_text_to_image.py`, an Accelerate loop, a plain
PyTorch loop), the way ORTTrainer's users wrapped a UNet in `ORTModule`:

    unet = turbotrain.compile(unet, backend="onnxruntime")   # then train as before
    loss = F.mse_loss(unet(noisy, t, text).sample, noise); loss.backward(); optimizer.step()

Contract: the module is compiled in place, exactly as `TurboTrainer` prepares its model (the backend's
`check_available` then `wrap_model`), and returned; its parameters, state dict, hooks and
`save_pretrained` stay the module's own. What is exact and what falls back is the backend's own, the
same as on the Trainer path: `eager` changes nothing; `inductor` draws dropout from eager's random
stream; `onnxruntime` checks every graph's first outputs against eager and runs a graph that fails to
export, run or match in eager with one warning naming the reason (`report()` lists the fallbacks).
Not here: `xla` (its step is a whole loop of its own: use `TurboTrainer`), and the model passes
(label sparsity and the others need labels or batches a Transformers model defines: `optimize(model)`).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import torch
from torch import nn

from turbotrain.backends import get_backend
from turbotrain.backends.base import Backend
from turbotrain.utils.warnings import log_once


def compile(
    module: nn.Module,
    backend: str = "auto",
    backend_options: dict | None = None,  # noqa: A001
    device: torch.device | str | None = None,
) -> nn.Module:
    """Put `module`'s forward (and so its backward) on `backend`, in place; returns `module`.

    `device`: where the step runs (default: the module's parameters' device). `auto` measures whole
    Trainer steps, which a bare module has none of: it runs the module eager and says so in one warning.
    Raises `BackendUnavailable` naming what to install.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"turbotrain.compile() takes an nn.Module, got {type(module).__name__}")
    first = next(module.parameters(), None)
    where = torch.device(device) if device is not None else (first.device if first is not None else torch.device("cpu"))
    chosen = get_backend(backend, backend_options)
    if chosen.owns_loop:
        raise ValueError(
            f"backend '{chosen.name}' runs a whole training loop of its own, not a module's step: "
            "use TurboTrainer with it, or choose eager, inductor or onnxruntime"
        )
    chosen.check_available(SimpleNamespace(device=where))
    note = chosen.without_trainer()  # auto: no Trainer steps to time here, so it says it cannot measure
    if note is not None:
        log_once(note, logging.WARNING)
    compiled = chosen.wrap_model(module)
    object.__setattr__(compiled, "_turbotrain_backend", chosen)
    return compiled


def backend_of(module: nn.Module) -> Backend | None:
    """The backend `compile` put `module` on (its `report()` says what it did), or None."""
    return getattr(module, "_turbotrain_backend", None)
