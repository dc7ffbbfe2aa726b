"""`XlaOptions`: the xla backend's options, from `TurboTrainingArguments(backend_options={...})`.

num_devices        how many devices the batch is spread over (default: all that jax sees; on several
                   hosts all of them, the only value allowed)
length_buckets     sequence lengths batches are padded up to, so few shapes compile (default: powers
                   of two from 16; a longer batch pads to the next power of two)
label_row_buckets  label sparsity pads the kept rows up to a multiple of (batch x length) / this
                   (default 8: at most 8 shapes per length, at most 1/8 of the rows wasted)
matmul_precision   jax's default matmul precision inside the step: "highest" (default, fp32 results
                   match eager's) or "default" (TPU bf16 passes / GPU TF32: faster, not exact)
shard              "data" (default): every device holds all parameters and AdamW moments; "fsdp": each
                   device holds 1/N of them (FSDP / ZeRO-3 over the same axis the batch is split on),
                   XLA gathers a weight where a layer needs it and reduce-scatters its gradient
host_timeout_s     on several hosts: a host not heard from for this long is taken as lost and the others
                   stop with one message (default 60; jax's own heartbeat limit is set to 3x this + 30)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turbotrain.backends.base import BackendOptions

MATMUL_PRECISIONS = ("highest", "high", "default")
SHARDINGS = ("data", "fsdp")


@dataclass(frozen=True)
class XlaOptions(BackendOptions):
    num_devices: int | None = None
    length_buckets: tuple[int, ...] | None = None
    label_row_buckets: int = 8
    matmul_precision: str = "highest"
    shard: str = "data"
    host_timeout_s: float = 60.0

    @classmethod
    def normalize(cls, options: dict[str, Any]) -> dict[str, Any]:
        if options.get("length_buckets") is not None:
            options["length_buckets"] = tuple(sorted(int(n) for n in options["length_buckets"]))
        return options

    def validate(self) -> None:
        if self.matmul_precision not in MATMUL_PRECISIONS:
            raise ValueError(f"matmul_precision must be one of {MATMUL_PRECISIONS}, got {self.matmul_precision!r}")
        if self.label_row_buckets < 1:
            raise ValueError(f"label_row_buckets must be >= 1, got {self.label_row_buckets}")
        if self.length_buckets is not None and (not self.length_buckets or min(self.length_buckets) < 1):
            raise ValueError(f"length_buckets must be positive lengths, got {self.length_buckets}")
        if self.shard not in SHARDINGS:
            raise ValueError(f"shard must be one of {SHARDINGS}, got {self.shard!r}")
        if not self.host_timeout_s > 0:
            raise ValueError(f"host_timeout_s must be positive, got {self.host_timeout_s}")
