"""Label sparsity's kept rows chosen on the host, in the collator, so a step on an accelerator never waits.

Why: label sparsity finds the rows whose label counts with `nonzero`, whose output size is data-dependent.
On CUDA the device must finish everything queued before it and copy the count back to the host before the
forward can go on: a host sync in every forward, which leaves the GPU idle while Python catches up. The
collator holds the labels on the CPU anyway; there the same `labelled_rows` waits for nothing, and its
result travels to the device with the batch (pinned, with the rest of it, by the DataLoader).

Contract: `HostRowsCollator(inner, causal)` adds to every batch whose `labels` are [B, T] the three
`HOST_ROWS_KEYS` (named in batch_keys.py):
* `turbotrain_label_rows` [K] int64: the flattened [B*T] positions whose target (the next label for a
  causal LM) is not -100;
* `turbotrain_label_targets` [K]: those targets;
* `turbotrain_label_grid`: an empty [B, T, 0] tensor whose shape records the labels' shape (no bytes to move).
It is label sparsity's collator step (`PassSpec.collator`, passes/registry.py), chosen where `wanted`.
Label sparsity's forward pre-hook takes the three off every call (`split`: the model never sees them) and
uses the rows in place of its own `nonzero` when the call's labels have the recorded shape. Exact: the same
function on the same labels gives the same rows and targets, so the numbers are those of the in-model choice.
Wrong only if code between the collator and the model rewrites label values in place, keeping the shape
(no Trainer, TRL or turbotrain path does; the shapes are checked on every call).

Where: `wanted(place)`: the step runs on an accelerator, inside Trainer's loop (a backend with a loop of its
own, xla, shapes its batches itself). On the CPU there is nothing to wait for, so the batches stay as they
were (and the numbers are the same either way).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from turbotrain.passes.registry import CollatorStep, StepPlace, batch_tensor
from turbotrain.utils.batch_keys import HOST_ROWS_KEYS, IGNORE_INDEX, LABEL_GRID, LABEL_ROWS, LABEL_TARGETS


def wanted(place: StepPlace) -> bool:
    """Whether the kept rows should come from the collator: the step runs on an accelerator (a sync there),
    and Trainer's loop hands the model the collated batch."""
    return torch.device(place.device).type != "cpu" and place.in_trainer_loop


@dataclass
class HostRowsCollator(CollatorStep):
    """Wraps a collator: collate (and pack) as before, then add the kept rows label sparsity will use."""

    causal: bool

    def step(self, batch):
        labels = batch_tensor(batch, "labels")
        if not torch.is_tensor(labels) or labels.dim() != 2 or labels.is_floating_point():
            return batch
        rows, targets = labelled_rows(labels, self.causal)
        batch[LABEL_ROWS], batch[LABEL_TARGETS] = rows, targets
        batch[LABEL_GRID] = labels.new_empty(*labels.shape, 0)
        return batch


def split(kwargs: dict) -> tuple[dict, tuple[torch.Tensor, torch.Tensor, torch.Size] | None]:
    """(kwargs without the collator's keys, (rows, targets, labels shape) or None if the batch had none)."""
    if LABEL_ROWS not in kwargs:
        return kwargs, None
    given = (kwargs[LABEL_ROWS], kwargs[LABEL_TARGETS], kwargs[LABEL_GRID].shape[:2])
    return {k: v for k, v in kwargs.items() if k not in HOST_ROWS_KEYS}, given


def rows_for(given, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The collator's (rows, targets) if they were made for labels of this shape, else None."""
    if given is None or tuple(given[2]) != tuple(labels.shape):
        return None
    rows, targets = given[0], given[1]
    return rows.to(labels.device, non_blocking=True), targets.to(labels.device, non_blocking=True)


def shifted_targets(labels: torch.Tensor, causal: bool) -> torch.Tensor:
    """The target of each position: the next label for a causal LM (Transformers shifts in its loss)."""
    return F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX) if causal else labels


def labelled_rows(labels: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, targets): the flattened [B*T] positions whose target is not -100, and those targets."""
    flat = shifted_targets(labels, causal).reshape(-1)
    rows = (flat != IGNORE_INDEX).nonzero().squeeze(1)
    return rows, flat.index_select(0, rows)
