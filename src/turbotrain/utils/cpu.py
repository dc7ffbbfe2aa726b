"""What the CPU can do for matmuls, read from /proc/cpuinfo (Linux; elsewhere: nothing known).

`matmul_flags()`: the bf16/fp16 matrix flags present (`amx_bf16`, `amx_tile`, `amx_fp16`,
`avx512_bf16`, `avx512_fp16`). With AMX-BF16 or AVX512-BF16 (`BF16_UNITS`) oneDNN runs bf16 matmuls
natively (AMX tiles: ~6x fp32 measured on a Xeon; AVX512-BF16: ~2.3x measured on an AMD EPYC); without
either, bf16 is emulated (converted to fp32) and slower than fp32.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

MATMUL_FLAGS = ("amx_bf16", "amx_tile", "amx_fp16", "avx512_bf16", "avx512_fp16")
BF16_UNITS = ("amx_bf16", "avx512_bf16")


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def matmul_flags(flags: frozenset[str] | None = None) -> list[str]:
    present = cpu_flags() if flags is None else flags
    return [flag for flag in MATMUL_FLAGS if flag in present]


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
