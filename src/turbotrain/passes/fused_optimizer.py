"""Fused optimizer: AdamW as one fused kernel (or one multi-tensor `foreach` launch) per step.

Contract: the same update as `transformers.Trainer`'s default optimizer, `torch.optim.AdamW` with the
Trainer's betas, epsilon, weight decay and parameter groups (decoupled weight decay, bias correction,
epsilon added after the square root). Only the implementation changes: `fused=True` where torch has a
fused AdamW kernel for the device (CPU, CUDA, XPU, MPS in current torch), `foreach=True` elsewhere.
Exact up to float rounding (fused and for-loop AdamW agree to ~1e-7 relative in fp32).

Saved: the per-parameter Python loop and its kernel launches (hundreds per step for a 12-layer model).

Aliases: `optim="adamw_ort_fused"` (ORTTrainer's name) means the fused AdamW, so old scripts run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from transformers.training_args import OptimizerNames

from turbotrain.boundaries.torch_boundary import fused_optimizer_devices
from turbotrain.passes.registry import PassOptions, option, register_pass

ORT_FUSED_ALIAS = "adamw_ort_fused"
FUSABLE = {OptimizerNames.ADAMW_TORCH.value, OptimizerNames.ADAMW_TORCH_FUSED.value}


def fused_adamw_devices() -> set[str]:
    """Device types for which this torch build has a fused AdamW kernel."""
    return fused_optimizer_devices()


def has_fused_adamw(device: torch.device | str) -> bool:
    return torch.device(device).type in fused_adamw_devices()


def resolve_optim_name(optim: str, device: torch.device | str, fused_optimizer: bool) -> str:
    """The Trainer `optim` name to use: fused AdamW where the device has it, else the user's choice.

    `adamw_torch` on a device without a fused kernel stays `adamw_torch` (torch picks `foreach` there).
    Any other optimizer the user named is left alone.
    """
    optim = str(getattr(optim, "value", optim))
    if optim == ORT_FUSED_ALIAS:
        optim = OptimizerNames.ADAMW_TORCH_FUSED.value
    if not fused_optimizer or optim not in FUSABLE:
        return optim
    if has_fused_adamw(device):
        return OptimizerNames.ADAMW_TORCH_FUSED.value
    return OptimizerNames.ADAMW_TORCH.value


def fused_adamw(params: Iterable, device: torch.device | str | None = None, **adamw_kwargs) -> torch.optim.AdamW:
    """`torch.optim.AdamW` with the fastest exact implementation for `device`, for users of their own loop."""
    params = list(params)
    if device is None:
        first = params[0]["params"][0] if isinstance(params[0], dict) else params[0]
        device = first.device
    if has_fused_adamw(device):
        return torch.optim.AdamW(params, fused=True, **adamw_kwargs)
    return torch.optim.AdamW(params, foreach=True, **adamw_kwargs)


@register_pass(
    order=60,
    install=None,  # not a model pass: the trainer creates its optimizer with `resolve_optim_name`
)
@dataclass(frozen=True)
class FusedOptimizerOptions(PassOptions):
    """Use the fused AdamW kernel where the device has one, foreach otherwise (exact;
    passes/fused_optimizer.py)."""

    fused_optimizer: bool = option(True)
