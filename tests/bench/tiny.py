"""The tiny benchmark workload the bench tests run end to end (one layer, hidden 32, two steps)."""

from __future__ import annotations

from turbotrain.bench.workload import Workload


def tiny_workload(**overrides) -> Workload:
    sizes = dict(hidden_size=32, num_layers=1, num_heads=2, seq_len=32, vocab_size=3000, batch_size=4)
    schedule = dict(rounds=1, steps=2, warmup=1, peers=("stock", "turbo"))
    return Workload(**{**sizes, **schedule, **overrides})
