"""`--bf16 on|off|auto`: which precision the main job trains in, printed with the model line.

"auto" turns bf16 autocast on where the hardware has native bf16 matmuls (bf16_hint.bf16_autocast_pays: a CPU
with AMX bf16 tiles or a CUDA device with bf16), fp32 otherwise, whatever the model's size; the answer depends
only on the (cached) CPU flags and the device, so the model line and the training arguments always agree. On a
CPU, Trainer autocasts only with `use_cpu=True` (as the benchmark's peers do, bench/peers.py), so the arguments
carry both: without CUDA, `--bf16 on` trains on the CPU (an MPS or XPU device is not used for bf16).
Measured on a 2-core AMX Xeon (benchmarks/2026-12-02-cpu-pretrain-sweep.md): bf16 steps 0.098 vs fp32
0.063 s for the default h128 x 2, 0.179 vs 0.205 s for h256 x 4; hence the default `off`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbotrain.training.bf16_hint import bf16_autocast_pays


@dataclass(frozen=True)
class Precision:
    bf16: bool
    reason: str

    @property
    def label(self) -> str:
        return f"{'bf16 autocast' if self.bf16 else 'fp32'} ({self.reason})"

    def trainer_arguments(self) -> dict:
        """TrainingArguments' bf16/use_cpu for this precision."""
        return {"bf16": self.bf16, "use_cpu": self.bf16 and not torch.cuda.is_available()}


def resolve_precision(choice: str) -> Precision:
    if choice == "on":
        return Precision(True, "--bf16 on")
    if choice == "off":
        return Precision(False, "--bf16 off")
    use, why = bf16_autocast_pays()
    return Precision(use, f"--bf16 auto: {why}")
