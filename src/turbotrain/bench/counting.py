"""What every peer's batches hold, counted as they are made: the throughput's units and the FLOPs' work.

`BatchCounter` stands where the peer's collator is called (it wraps the user's collator, unchanged; a TRL
trainer's own collator is wrapped after the trainer made it) and notes per batch, before any packing:

* rows: the batch's first dimension; tokens: real tokens (the attention mask's ones, else every input id)
  and slots (the padded batch's positions); label tokens: labels other than -100, and label slots;
* work: `step_work(batch)`, the FLOPs' work (measure/flops.py) with and without packing and label
  sparsity, for workloads whose FLOP formula applies (else None).

A batch is counted once however often the trainer reads it; entry i is the i-th batch collated, which is
step i's with one batch per step (no gradient accumulation in the benchmark).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from turbotrain.utils.batch_keys import IGNORE_INDEX


@dataclass(frozen=True)
class BatchCount:
    rows: int
    tokens: int
    slots: int
    label_tokens: int
    label_slots: int
    work: dict | None = None  # (packed, sparse_head) -> StepWork

    def units(self, unit: str) -> int:
        return {"tokens": self.tokens, "label tokens": self.label_tokens, "examples": self.rows}[unit]


def count_batch(batch: dict, work: dict | None = None) -> BatchCount:
    tensors = [value for value in batch.values() if isinstance(value, torch.Tensor) and value.dim() > 0]
    rows = tensors[0].shape[0] if tensors else 0
    ids, mask, labels = batch.get("input_ids"), batch.get("attention_mask"), batch.get("labels")
    slots = ids.numel() if ids is not None else 0
    tokens = int(mask.sum()) if mask is not None and ids is not None else slots
    kept = int((labels != IGNORE_INDEX).sum()) if isinstance(labels, torch.Tensor) else 0
    label_slots = labels.numel() if isinstance(labels, torch.Tensor) else 0
    return BatchCount(rows, tokens, slots, kept, label_slots, work)


class BatchCounter:
    """The inner collator's batches, unchanged, each one counted (`counts`)."""

    def __init__(self, inner=None, step_work: Callable[[dict], dict | None] | None = None):
        self.inner = inner
        self.step_work = step_work
        self.counts: list[BatchCount] = []

    def wrap(self, inner) -> BatchCounter:
        self.inner = inner
        return self

    def note(self, batch: dict) -> dict:
        self.counts.append(count_batch(batch, self.step_work(batch) if self.step_work else None))
        return batch

    def __call__(self, features):
        return self.note(self.inner(features))
