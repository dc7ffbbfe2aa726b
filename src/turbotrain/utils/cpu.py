"""What the CPU can do for matmuls, read from /proc/cpuinfo (Linux; elsewhere: nothing known).

`matmul_flags()`: the bf16/fp16 matrix flags present (`amx_bf16`, `amx_tile`, `amx_fp16`,
`avx512_bf16`, `avx512_fp16`) that oneDNN may use. With AMX-BF16 or AVX512-BF16 (`BF16_UNITS`) oneDNN runs bf16
matmuls natively (AMX tiles: ~6x fp32 measured on a Xeon; AVX512-BF16: ~2.3x measured on an AMD EPYC); without
either, bf16 is emulated (converted to fp32) and slower than fp32. oneDNN's own cap, `ONEDNN_MAX_CPU_ISA` (or the
older `DNNL_MAX_CPU_ISA`), takes the flags above it away: with `AVX2` on an EPYC that has avx512_bf16, a
512x1024x4096 matmul under bf16 autocast took 6.3 s against fp32's 20 ms (6.5 ms uncapped), as on a CPU without
the units; an unknown value caps nothing.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

MATMUL_FLAGS = ("amx_bf16", "amx_tile", "amx_fp16", "avx512_bf16", "avx512_fp16")
BF16_UNITS = ("amx_bf16", "avx512_bf16")
# oneDNN's ISA names, lowest first (each later one includes the earlier), and the lowest that uses each flag
ONEDNN_ISAS = (
    "SSE41",
    "AVX",
    "AVX2",
    "AVX2_VNNI",
    "AVX2_VNNI_2",
    "AVX512_CORE",
    "AVX512_CORE_VNNI",
    "AVX512_CORE_BF16",
    "AVX10_1_512",
    "AVX512_CORE_FP16",
    "AVX10_1_512_AMX",
    "AVX512_CORE_AMX",
    "AVX10_1_512_AMX_FP16",
    "AVX512_CORE_AMX_FP16",
)
FLAG_ISA = {
    "avx512_bf16": "AVX512_CORE_BF16",
    "avx512_fp16": "AVX10_1_512",
    "amx_bf16": "AVX10_1_512_AMX",
    "amx_tile": "AVX10_1_512_AMX",
    "amx_fp16": "AVX10_1_512_AMX_FP16",
}


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
    """The matrix flags present that oneDNN may use (under its ISA cap, `onednn_isa_cap`)."""
    present = cpu_flags() if flags is None else flags
    cap = onednn_isa_cap()
    usable = [flag for flag in MATMUL_FLAGS if flag in present]
    if cap is None:
        return usable
    return [flag for flag in usable if ONEDNN_ISAS.index(FLAG_ISA[flag]) <= ONEDNN_ISAS.index(cap)]


def cap_note() -> str:
    """' (oneDNN capped at X: it hides a, b)' where the cap hides matrix flags the CPU has, else ''."""
    cap = onednn_isa_cap()
    if cap is None:
        return ""
    usable = matmul_flags()
    hidden = [flag for flag in MATMUL_FLAGS if flag in cpu_flags() and flag not in usable]
    return f" (oneDNN capped at {cap} by ONEDNN_MAX_CPU_ISA: it hides {', '.join(hidden)})" if hidden else ""


def onednn_isa_cap() -> str | None:
    """The highest ISA oneDNN is allowed (`ONEDNN_MAX_CPU_ISA`, else `DNNL_MAX_CPU_ISA`), or None: none set, `ALL`,
    or a name not known here."""
    value = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    return value if value in ONEDNN_ISAS else None


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
