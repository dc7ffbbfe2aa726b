"""Peak memory of one measured segment.

CUDA: `torch.cuda.max_memory_allocated` after a reset (tensor memory, exact).
CPU (Linux): the process's peak resident set (VmHWM) after resetting it through /proc/self/clear_refs,
so each interleaved segment gets its own peak. It includes the interpreter and libraries (~0.5-1 GB),
the same for every peer, so differences between peers are what the step itself needs.
"""

from __future__ import annotations

from pathlib import Path

import torch


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

    def peak_mb(self) -> float | None:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        if self.kind != "peak RSS":
            return None
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return None
