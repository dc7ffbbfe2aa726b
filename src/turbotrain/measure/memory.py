"""Peak memory of one measured segment, and where it went.

`PeakMemory`:
* CUDA: `torch.cuda.max_memory_allocated` after a reset (tensor memory, exact); `current_mb` is
  `memory_allocated`.
* CPU (Linux): the process's peak resident set (VmHWM) after resetting it through /proc/self/clear_refs,
  so each interleaved segment gets its own peak; `current_mb` is the resident set now (VmRSS). It
  includes the interpreter and libraries (~0.5-1 GB), the same for every peer, so differences between
  peers are what the step itself needs. `release_freed()` first hands the memory earlier segments freed
  back to the system (glibc's `malloc_trim`): else the allocator keeps it resident and reuses it, and a
  segment's growth would miss what it reused.

`MemorySplit`: a segment's peak less what the process held when the segment began (`growth_mb`), split
into what a training step must hold, each read from the run itself:
* weights: the model's parameters (each tensor once: a tied head is the embedding);
* gradients: one buffer per trainable parameter (a LoRA run's frozen base has none);
* optimizer state: the optimizer's state tensors after the run (AdamW: two per trainable parameter);
* logits: the fp32 logits the loss reads, [rows the head ran on, V], as the caller counts them (stock:
  every position; label sparsity: the kept rows; the chunked head: one chunk); None where not counted;
* activations: the rest of the growth: what the forward saves for the backward, the logits' softmax
  and gradient, temporaries and allocator slack (never below 0: memory the process freed before the
  segment and reuses in it is not in the growth).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from turbotrain.utils.freed_memory import release_freed_memory

MB = 2**20


class PeakMemory:
    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.kind = "cuda allocated" if self.device.type == "cuda" else self._cpu_kind()

    @staticmethod
    def _cpu_kind() -> str:
        return "peak RSS" if Path("/proc/self/clear_refs").exists() else "unavailable"

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.kind == "peak RSS":
            try:
                Path("/proc/self/clear_refs").write_text("5")
            except OSError:
                self.kind = "unavailable"

    def release_freed(self) -> None:
        """Collect garbage and return freed heap memory to the system, so the resident set is what is live."""
        if self.device.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()
            return
        release_freed_memory()  # not glibc: the resident set keeps what the allocator holds

    def peak_mb(self) -> float | None:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / MB
        return self._status_mb("VmHWM:") if self.kind == "peak RSS" else None

    def current_mb(self) -> float | None:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device) / MB
        return self._status_mb("VmRSS:") if self.kind == "peak RSS" else None

    @staticmethod
    def _status_mb(field: str) -> float | None:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 1024
        return None


@dataclass(frozen=True)
class MemorySplit:
    """Megabytes of a segment's growth by what holds them (see the module docstring)."""

    weights_mb: float
    gradients_mb: float
    optimizer_mb: float
    logits_mb: float | None  # None: not counted (then in activations)
    activations_mb: float


def parameter_bytes(model: nn.Module, trainable_only: bool = False) -> int:
    """Bytes of `model`'s parameters (shared tensors once), or of those that train."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad or not trainable_only)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer | None) -> int:
    """Bytes of every tensor in the optimizer's state (moments, step counters)."""
    if optimizer is None:
        return 0
    tensors = (value for state in optimizer.state.values() for value in state.values())
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def split_growth(growth_mb: float, model: nn.Module, optimizer, logits_bytes: int | None) -> MemorySplit:
    """`growth_mb` (a segment's peak less the memory held when it began) by what holds it."""
    weights = parameter_bytes(model) / MB
    gradients = parameter_bytes(model, trainable_only=True) / MB
    optimizer_mb = optimizer_state_bytes(optimizer) / MB
    logits = logits_bytes / MB if logits_bytes is not None else None
    rest = growth_mb - weights - gradients - optimizer_mb - (logits or 0.0)
    return MemorySplit(weights, gradients, optimizer_mb, logits, max(rest, 0.0))
