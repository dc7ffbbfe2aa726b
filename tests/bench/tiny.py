"""The tiny benchmark workloads the bench tests run end to end (one layer, hidden 32, two steps)."""

from __future__ import annotations

from turbotrain.bench.workloads import make_workload

SIZES = dict(hidden_size=32, num_layers=1, num_heads=2, batch_size=4)
SCHEDULE = dict(rounds=1, steps=2, warmup=1, peers=("stock", "turbo"))


def tiny_workload(task: str = "mlm", **overrides):
    sizes = {**SIZES, "seq_len": 32, "vocab_size": 3000} if task in ("mlm", "cls", "clm", "sft") else SIZES
    return make_workload(task, **{**sizes, **SCHEDULE, **overrides})
