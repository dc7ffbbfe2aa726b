"""How much label sparsity can win on a workload at most: the head's share of the stock step, measured.

Label sparsity runs the output head and the loss on the labelled rows only; everything else in the step
is unchanged. So the whole step can be at most `step / (step - head_dense + head_sparse)` faster (every
padded label row removed from the head), and never more than `step / (step - head_dense)` (a free head).
This module times, interleaved on the same batches and the same stock model:

* `step`: the stock training step (forward, backward, optimizer);
* `head_dense`: the head and cross-entropy, forward and backward, on every decoder/sequence row (stock);
* `head_sparse`: the same on the labelled rows only.

Both head timings take hidden states of the step's shape [B, T, H] (random: the time does not depend on
the values) and the step's own labels. The causal shift of decoder-only LMs does not change the row count
by more than B, so it is ignored here.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from turbotrain.modeling import IGNORE_INDEX, unwrap


@dataclass(frozen=True)
class HeadShare:
    step_ms: float
    head_dense_ms: float
    head_sparse_ms: float

    @property
    def share(self) -> float:
        """The head and loss as a share of the stock step."""
        return self.head_dense_ms / self.step_ms

    @property
    def bound_sparse(self) -> float:
        """The largest step speed-up label sparsity can give here (inf where the head alone timed at least as
        long as the whole step: timing noise at tiny sizes, no bound measured)."""
        return _speedup(self.step_ms, self.step_ms - self.head_dense_ms + self.head_sparse_ms)

    @property
    def bound_free_head(self) -> float:
        """The speed-up if the head and loss cost nothing at all (inf where nothing else was measured)."""
        return _speedup(self.step_ms, self.step_ms - self.head_dense_ms)

    def __str__(self) -> str:
        return (
            f"stock step {self.step_ms:.0f} ms; head + loss {self.head_dense_ms:.0f} ms ({self.share:.1%} of the "
            f"step), {self.head_sparse_ms:.0f} ms on the labelled rows; so label sparsity can give at most "
            f"{self.bound_sparse:.3f}x here, and a head costing nothing {self.bound_free_head:.3f}x"
        )


def _speedup(step_ms: float, rest_ms: float) -> float:
    return step_ms / rest_ms if rest_ms > 0 else float("inf")


def _head_step(head: nn.Module, labels: torch.Tensor, hidden_size: int, sparse: bool) -> None:
    hidden = torch.randn(labels.numel(), hidden_size, requires_grad=True)
    targets = labels.reshape(-1)
    if sparse:
        kept = targets != IGNORE_INDEX
        hidden, targets = hidden[kept], targets[kept]
    loss = F.cross_entropy(head(hidden).float(), targets, ignore_index=IGNORE_INDEX)
    loss.backward()
    head.zero_grad(set_to_none=True)


def measure_head_share(
    model: nn.Module, batches: Sequence[dict], rounds: int = 3, warmup: int = 1, bf16: bool = False
) -> HeadShare:
    """Time the stock step and its head on `batches` (collated, with `labels`), interleaved per batch;
    with `bf16`, all of it under bf16 autocast (as Trainer's `bf16=True`)."""
    model = unwrap(model).train()
    head = model.get_output_embeddings()
    hidden_size = head.weight.shape[1]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step(batch: dict) -> None:
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    timings: dict[str, list[float]] = {"step": [], "dense": [], "sparse": []}
    work: dict[str, Callable[[dict], None]] = {
        "step": step,
        "dense": lambda b: _head_step(head, b["labels"], hidden_size, sparse=False),
        "sparse": lambda b: _head_step(head, b["labels"], hidden_size, sparse=True),
    }
    for round_index in range(rounds + warmup):
        for batch in batches:
            for name, run in work.items():
                start = time.perf_counter()
                with torch.autocast("cpu", torch.bfloat16) if bf16 else contextlib.nullcontext():
                    run(batch)
                if round_index >= warmup:
                    timings[name].append(time.perf_counter() - start)
    step_s, dense_s, sparse_s = (statistics.median(timings[k]) for k in ("step", "dense", "sparse"))
    return HeadShare(step_ms=step_s * 1e3, head_dense_ms=dense_s * 1e3, head_sparse_ms=sparse_s * 1e3)
