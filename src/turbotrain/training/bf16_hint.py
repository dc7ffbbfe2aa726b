"""One line for a CPU run in fp32: would bf16 be faster on this CPU, measured?

* The CPU has bf16 matmul units (`amx_bf16` or `avx512_bf16`, utils/cpu.py): time a bf16 and an fp32
  matmul here (1024², best of 3 each, ~0.1 s on 2 cores) and say how much faster bf16 matmuls run. The
  answer is measured once per machine, as `auto`'s backend choice is: cached in `$TURBOTRAIN_CACHE/bf16_probe.json`
  (utils/cache.py) under the CPU model, its matmul flags, torch's version and thread count (`probe_key`), so
  every run on the machine prints the same figures (a busy machine's first measurement stays; delete the file
  to measure again). That is the bound on what `bf16=True` can give: only the matmul share of a step speeds up
  (measured on an AMX Xeon: matmuls 6.2x, a GPT-2 step 1.75x).
* It lacks them: bf16 is emulated (converted to fp32 around every matmul) and slower; say to keep fp32.

Nothing is said for runs that already use bf16/fp16 or run on an accelerator.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable

import torch

from turbotrain.measure.peak import matmul_peak
from turbotrain.utils.cache import digest, read_entry, write_entry
from turbotrain.utils.cpu import BF16_UNITS, cap_note, cpu_model, matmul_flags

CACHE_FILE = "bf16_probe.json"


def probe_key() -> str:
    """What the probe's answer is valid for: this CPU (model and matmul flags), torch's version and threads."""
    return digest(cpu_model(), ",".join(matmul_flags()), torch.__version__, str(torch.get_num_threads()))


def time_matmuls() -> tuple[float, float, float]:
    """(bf16 / fp32 matmul speed, fp32 GFLOP/s, bf16 GFLOP/s), 1024² matmuls on this CPU, measured now."""
    fp32 = matmul_peak(torch.float32, size=1024, repeats=3).gflops
    bf16 = matmul_peak(torch.bfloat16, size=1024, repeats=3).gflops
    return bf16 / fp32, fp32, bf16


def cached_speedup(key: str, measure: Callable[[], tuple[float, float, float]]) -> tuple[float, float, float]:
    """The answer cached under `key`, else `measure()`'s, cached."""
    entry = read_entry(CACHE_FILE, key)
    if entry is not None:
        return entry["speedup"], entry["fp32_gflops"], entry["bf16_gflops"]
    speedup, fp32, bf16 = measure()
    day = datetime.date.today().isoformat()
    write_entry(CACHE_FILE, key, {"speedup": speedup, "fp32_gflops": fp32, "bf16_gflops": bf16, "date": day})
    return speedup, fp32, bf16


@functools.lru_cache(maxsize=1)
def measured_bf16_speedup() -> tuple[float, float, float]:
    """(bf16 / fp32 matmul speed, fp32 GFLOP/s, bf16 GFLOP/s) on this machine: cached, else measured once."""
    return cached_speedup(probe_key(), time_matmuls)


def bf16_hint(
    flags: frozenset[str] | None = None, measure: Callable[[], tuple[float, float, float]] = measured_bf16_speedup
) -> str:
    """The line to log for an fp32 CPU run (flags and the measurement injectable for tests)."""
    units = [flag for flag in matmul_flags(flags) if flag in BF16_UNITS]  # under oneDNN's ISA cap
    if not units:
        return (
            f"turbotrain: this CPU ({cpu_model()}) has no bf16 matmul units (no amx_bf16/avx512_bf16){cap_note()}: "
            "bf16 would be emulated and slower than fp32 here; fp32 is the fast path."
        )
    speedup, fp32, bf16 = measure()
    if speedup < 1.1:
        return (
            f"turbotrain: this CPU has {'/'.join(units)}, but bf16 matmuls measured only {speedup:.2f}x fp32 here "
            f"({bf16:,.0f} vs {fp32:,.0f} GFLOP/s): fp32 is as fast."
        )
    return (
        f"turbotrain: this CPU has bf16 matmul units ({'/'.join(units)}): bf16 matmuls measured {speedup:.1f}x "
        f"faster than fp32 here ({bf16:,.0f} vs {fp32:,.0f} GFLOP/s); bf16=True would speed up the matmul share "
        f"of each step by up to that (not the same numbers: bf16 rounds). Training in fp32 as asked."
    )


def wants_hint(args) -> bool:
    """An fp32 run on the CPU: the only case the hint speaks to."""
    return args.device.type == "cpu" and not (args.bf16 or args.fp16)


def bf16_autocast_pays(flags: frozenset[str] | None = None, cuda_bf16: bool | None = None) -> tuple[bool, str]:
    """(use bf16 autocast?, why): a CUDA device that supports bf16, or a CPU with AMX bf16 tiles.

    AVX512-BF16 alone is not enough: its bf16 matmuls ran ~2.3x fp32 (utils/cpu.py), too little to pay for
    autocast's casts around every op in a small model; AMX tiles ran ~6x (3.7x on a 2-core Xeon, 1024² matmuls).
    Flags and CUDA are injectable."""
    if cuda_bf16 is None:
        cuda_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if cuda_bf16:
        return True, "CUDA device supports bf16"
    if "amx_bf16" in matmul_flags(flags):  # under oneDNN's ISA cap
        return True, "CPU has amx_bf16"
    return False, f"CPU has no amx_bf16 ({cpu_model()})"
