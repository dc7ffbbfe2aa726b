"""Held-out masked-token metrics: loss (mean cross-entropy over masked tokens), top-1 and top-5 accuracy.

Computed from full logits in eval mode on the fixed held-out batches (data.py), the same way for
stock `Trainer` and `TurboTrainer` models, so runs compare on the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from turbotrain.utils.mode import training_mode


@dataclass
class HeldOut:
    loss: float
    top1: float
    top5: float


@torch.no_grad()
def evaluate_masked(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]]) -> HeldOut:
    with training_mode(model, False):
        return _held_out(model, batches)


def _held_out(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]]) -> HeldOut:
    total_loss, top1, top5, count = 0.0, 0, 0, 0
    device = next(model.parameters()).device
    for batch in batches:
        labels = batch["labels"].to(device)
        keep = labels != -100
        if not keep.any():
            continue
        logits = model(
            input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)
        ).logits
        logits, target = logits[keep].float(), labels[keep]  # [B, T, V] -> [K, V]
        total_loss += float(F.cross_entropy(logits, target, reduction="sum"))
        best = logits.topk(5, dim=-1).indices
        top1 += int((best[:, 0] == target).sum())
        top5 += int((best == target[:, None]).any(dim=-1).sum())
        count += int(target.numel())
    if count == 0:
        return HeldOut(float("nan"), 0.0, 0.0)
    return HeldOut(total_loss / count, top1 / count, top5 / count)
