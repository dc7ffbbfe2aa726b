"""A pass's step of the training collator (`PassSpec.collator`, passes/registry.py): collate with the collator it
wraps (`inner`, the user's or the next pass's step) exactly as before, then `step` that batch: add the pass's
batch keys or rewrite it. `batch_tensor` reads a key of a batch of any type (a dict, BatchEncoding, or a collator's
own type without keys: None)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class CollatorStep:
    """Wraps `inner`; subclasses (dataclasses: their fields follow `inner`) write `step(batch)`, which returns the
    batch the model gets."""

    inner: Callable

    def __call__(self, features):
        return self.step(self.inner(features))

    def step(self, batch):
        raise NotImplementedError


def batch_tensor(batch: Any, key: str) -> Any:
    """`batch[key]` where the batch has keys and that one, else None."""
    return batch.get(key) if hasattr(batch, "get") else None
