"""Host-side batch preparation for the xla backend: fixed shapes, so each shape compiles once.

Every new input shape makes XLA compile the step again (8-14 s for a small model on a CPU), so the
batches of one optimizer step are brought to a few fixed shapes before they reach the device:

* rows: padded to this host's rows of the global batch (`rows`: all of it on one host; a short last
  batch), with `labels` -100 and an attention mask that shows only the first token (a fully masked
  row can turn into NaN inside attention);
* length: padded on the right to a length bucket (`input_ids` with the pad token, `attention_mask` 0,
  `labels` -100, other per-token inputs 0); a batch without `attention_mask` gets one of ones;
* the micro-batches of one step (gradient accumulation) are stacked, [A, B, L];
* label sparsity: the kept rows are chosen here (`kept_rows`), padded to a multiple of
  (B x L) / `label_row_buckets` entries, [A, K], as indices into the global batch (a host's rows
  start at `host_block` x B x L).

On several hosts every host's arrays must have one shape: the loop first asks each host's needs
(`needed_shape`: longest sequence, most labelled positions), takes the maxima over the hosts
(`hosts.Hosts.agree`) and passes them to `step_arrays`.
Exact: a padded position or row carries label -100 and is invisible to every real token (right
padding, masked), so the loss and the gradients are the unpadded batch's. int64 inputs become int32
(jax runs without 64-bit types by default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from turbotrain.backends.xla.state import host_array
from turbotrain.modeling import IGNORE_INDEX
from turbotrain.passes.label_sparsity import kept_rows, shifted_targets

ROWS = "turbotrain_rows"
KEPT = "turbotrain_kept"
MIN_BUCKET = 16
TOKEN_FILL = {"labels": IGNORE_INDEX, "attention_mask": 0}


@dataclass(frozen=True)
class BatchLayout:
    """How batches are shaped: this host's rows and devices, length buckets, label-sparsity buckets."""

    rows: int  # this host's rows of one micro-batch (the global batch on one host)
    devices: int  # this host's devices, which split the rows
    pad_token_id: int
    length_buckets: tuple[int, ...] | None = None
    label_row_buckets: int = 8
    sparsity_causal: bool | None = None  # None: label sparsity off
    host_block: int = 0  # this host's block of the global batch: its rows start at host_block x rows

    def bucket_length(self, length: int) -> int:
        for bucket in self.length_buckets or ():
            if bucket >= length:
                return bucket
        return max(MIN_BUCKET, 1 << max(length - 1, 0).bit_length())

    def kept_row_count(self, count: int, length: int) -> int:
        unit = math.ceil(self.rows * length / self.label_row_buckets)
        unit = math.ceil(unit / self.devices) * self.devices
        return max(1, math.ceil(count / unit)) * unit


def _pad_tokens(name: str, value: torch.Tensor, rows: int, length: int, pad_token_id: int) -> torch.Tensor:
    fill = pad_token_id if name == "input_ids" else TOKEN_FILL.get(name, 0)
    out = torch.full((rows, length, *value.shape[2:]), fill, dtype=value.dtype)
    out[: value.shape[0], : value.shape[1]] = value
    return out


def _pad_rows(name: str, value: torch.Tensor, rows: int) -> torch.Tensor:
    if value.shape[0] == rows:
        return value
    if value.is_floating_point():
        raise ValueError(
            f"turbotrain xla: a short batch ({value.shape[0]} rows, not {rows}) cannot be padded because '{name}' "
            "holds floats (no ignore value); set dataloader_drop_last=True"
        )
    out = torch.full((rows, *value.shape[1:]), IGNORE_INDEX if name == "labels" else 0, dtype=value.dtype)
    out[: value.shape[0]] = value
    return out


def pad_batch(batch: dict, layout: BatchLayout, length: int) -> dict[str, torch.Tensor]:
    """One micro-batch padded to [rows, length] (see the module docstring for the fill values)."""
    input_ids = batch["input_ids"]
    real_rows, real_length = input_ids.shape
    rows = layout.rows
    if real_rows > rows:
        raise ValueError(f"turbotrain xla: a batch of {real_rows} rows is larger than this host's {rows}")
    batch = dict(batch)
    if "attention_mask" not in batch:
        batch["attention_mask"] = torch.ones_like(input_ids)
    padded = {}
    for name, value in batch.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"turbotrain xla: batch entry '{name}' is a {type(value).__name__}, not a tensor")
        if value.dim() >= 2 and value.shape[:2] == (real_rows, real_length):
            padded[name] = _pad_tokens(name, value, rows, length, layout.pad_token_id)
        else:
            padded[name] = _pad_rows(name, value, rows)
    padded["attention_mask"][real_rows:, 0] = 1  # a padding row sees one token: no fully masked softmax
    return padded


def _sparse_labels(batch: dict, layout: BatchLayout) -> bool:
    return layout.sparsity_causal is not None and "labels" in batch and batch["labels"].dim() == 2


def needed_shape(micro_batches: list[dict], layout: BatchLayout) -> tuple[int, int]:
    """(longest sequence, most labelled positions of one micro-batch) of this host's micro-batches."""
    if not micro_batches or any("input_ids" not in b for b in micro_batches):
        raise ValueError("turbotrain xla: every training batch needs 'input_ids'")
    length = max(b["input_ids"].shape[1] for b in micro_batches)
    labelled = [
        int((shifted_targets(b["labels"], layout.sparsity_causal) != IGNORE_INDEX).sum())
        for b in micro_batches
        if _sparse_labels(b, layout)
    ]
    return length, max(labelled, default=0)


def step_arrays(
    micro_batches: list[dict], layout: BatchLayout, length: int | None = None, labelled: int | None = None
) -> dict[str, np.ndarray]:
    """The micro-batches of one optimizer step as stacked arrays [A, B, L, ...] (and [A, K] kept rows),
    padded for the longest sequence and most labelled positions given (default: these batches' own)."""
    own_length, own_labelled = needed_shape(micro_batches, layout)
    length = layout.bucket_length(max(own_length, length or 0))
    padded = [pad_batch(b, layout, length) for b in micro_batches]
    keys = set(padded[0])
    if any(set(p) != keys for p in padded):
        raise ValueError("turbotrain xla: the micro-batches of one step carry different inputs")
    arrays = {name: np.stack([host_array(p[name]) for p in padded]) for name in sorted(keys)}
    if _sparse_labels(padded[0], layout):
        count = layout.kept_row_count(max(own_labelled, labelled or 0), length)
        arrays.update(_kept_rows(padded, layout, length, count))
    return arrays


def _kept_rows(padded: list[dict], layout: BatchLayout, length: int, count: int) -> dict[str, np.ndarray]:
    chosen = [kept_rows(p["labels"], layout.sparsity_causal, count) for p in padded]
    first_row = layout.host_block * layout.rows * length  # indices into the global [B x L] positions
    return {
        ROWS: np.stack([host_array(rows) + first_row for rows, _ in chosen]),
        KEPT: np.stack([host_array(kept) for _, kept in chosen]),
    }
