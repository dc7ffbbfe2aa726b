"""The machine's matmul peak for one dtype, measured: the denominator of MFU.

`matmul_peak(dtype)` times `repeats` square matmuls of `size` (default 2048: large enough that oneDNN
and cuBLAS reach their steady rate, small enough to take ~1 s on a 2-core CPU in fp32) after one
warm-up, and returns the best FLOP/s seen (2·n³ per matmul). The best, not the median: the peak is
what the hardware can do, and a shared CPU only ever lowers a sample. Measured in the same process as
the benchmark, with the same thread count, on the same device, at the start of the run.

Cost: fp32 2048² on 2 cores of an AMD EPYC is ~0.14 s per matmul (~120 GFLOP/s); 5 repeats ~1 s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MatmulPeak:
    dtype: str
    size: int
    flops_per_s: float
    device: str

    @property
    def gflops(self) -> float:
        return self.flops_per_s / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(
    dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu", size: int = 2048, repeats: int = 5
) -> MatmulPeak:
    """Best measured FLOP/s of `size`×`size` @ `size`×`size` matmuls in `dtype` on `device`."""
    device = torch.device(device)
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
    torch.mm(a, b)
    _sync(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return MatmulPeak(str(dtype).removeprefix("torch."), size, 2 * size**3 / best, str(device))
