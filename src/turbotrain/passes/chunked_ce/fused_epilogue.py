"""The chunked head's softmax and gradient in one fused kernel on CUDA, where a timing on the device says it wins.

Per chunk the SFT op (chunked_ce/__init__.py `_chunk`) turns the logits [C, V] of one matmul into the rows' NLL
and dz = softmax(z) - onehot(target) with eager torch ops: the upcast to fp32, the log-sum-exp, the gather, the
exp, the one-hot subtraction, the downcast (and with TRL's statistics an arg-max and a second fp32 [C, V] for
the entropy). Each is a pass over [C, V] in memory, ~40 bytes per logit in all, against the 6·H FLOPs per logit
of the chunk's three matmuls: at H = 896 (Qwen2.5-0.5B) on an H100 (989 TFLOP/s bf16, 3.35 TB/s) the passes
take about twice the matmuls' time, and the fp32 copies are the chunk's peak memory (~8·C·V bytes: 2.5 GB at
C = 2,048 and V = 151,936).

`softmax_gradient(logits, bias, target, softcap, want_stats)` is the same arithmetic written as one function of
the matmul's output: z = fp32(logits) (+ fp32 bias), soft-capped if asked, log-sum-exp, nll = lse - z[target],
p = exp(z - lse), dz = p - onehot(target) (times 1 - tanh² under soft-capping) in the logits' dtype; with
`want_stats`, entropy = lse - Σ p·z and whether the target is the arg-max. Compiled by Inductor (dynamic row
counts: one graph for every chunk and batch), it becomes a few reductions and one elementwise kernel that
read the half logits and write the half dz: ~10 bytes per logit and no fp32 [C, V] tensor (2·C·V bytes of
logits plus 2·C·V of dz at the peak; soft-capping keeps one fp32 [C, V], its tanh).

Exact: the same fp32 operations per element as the eager chunk; only the order of the reductions' sums
differs (float order: tests/passes/test_fused_epilogue.py compares the two on the CPU's Inductor).

When (`fused_for`): on CUDA with Triton (Inductor's GPU code generator), outside a compiled region (there the
whole head is Inductor's already), never on the CPU (whose op is the one measured in benchmarks/). The first
call of each kind (vocabulary, hidden size, dtype, chunk rows, soft-cap, bias, statistics) times one chunk
both ways (passes/device_timing.py `measured`: the compile in the untimed warm-up, medians of 5 alternating,
cached in `pass_timing.json`), and the fused kernel answers where it was at most as slow; the choice is
logged once with both times. If the compile or the timing raises, the eager chunk answers, said once in a
warning naming the error.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import torch

from turbotrain.boundaries import torch_boundary
from turbotrain.passes import device_timing
from turbotrain.utils.warnings import warn_once

logger = logging.getLogger("turbotrain")

NAME = "chunked head softmax and gradient, fused"
_chosen: dict[tuple, Callable | None] = {}


def softmax_gradient(logits, bias, target, softcap: float | None, want_stats: bool):
    """(nll [C] fp32, dz [C, V] in the logits' dtype, entropy [C] or None, is_top1 [C] or None) of one chunk's
    logits [C, V] (the head's matmul output; bias [V] or None added in fp32, as the eager chunk does)."""
    z = logits.float()
    if bias is not None:
        z = z + bias.float()
    tanh = None
    if softcap:
        tanh = torch.tanh(z / softcap)
        z = tanh * softcap
    lse = torch.logsumexp(z, dim=1)  # [C]
    nll = lse - z.gather(1, target[:, None]).squeeze(1)
    probs = torch.exp(z - lse[:, None])
    columns = torch.arange(z.shape[1], device=z.device)
    dz = torch.where(columns[None, :] == target[:, None], probs - 1, probs)  # d nll / d z
    if tanh is not None:
        dz = dz * (1 - tanh * tanh)
    if not want_stats:
        return nll, dz.to(logits.dtype), None, None
    entropy = lse - (probs * z).sum(dim=1)
    return nll, dz.to(logits.dtype), entropy, z.argmax(dim=1) == target


@functools.cache
def compiled() -> Callable:
    """`softmax_gradient` through Inductor, one graph for any number of rows."""
    return torch.compile(softmax_gradient, dynamic=True)


def compiles_on(device: torch.device) -> bool:
    """Whether Inductor builds GPU kernels for `device` here: CUDA with Triton."""
    return device.type == "cuda" and torch_boundary.has_triton()


def fused_for(device, weight, bias, chunk_rows: int, softcap, want_stats: bool, eager: Callable) -> Callable | None:
    """The fused epilogue for this head's chunks on `device`, or None (the eager chunk) where it does not apply or
    measured slower; `weight` [V, H] as the chunk loop multiplies it (in the compute dtype), `eager(h, target)`
    one eager chunk (its matmul included, as the fused chunk's is)."""
    if not device_timing.timed_on(device) or torch.compiler.is_compiling() or not compiles_on(device):
        return None
    kind = (*weight.shape, str(weight.dtype), chunk_rows, softcap or 0.0, bias is not None, want_stats)
    if kind not in _chosen:
        _chosen[kind] = _measured_choice(device, weight, bias, chunk_rows, softcap, want_stats, eager, kind)
    return _chosen[kind]


def _measured_choice(device, weight, bias, chunk_rows, softcap, want_stats, eager, kind) -> Callable | None:
    fused = compiled()
    generator = device_timing.generator(device)
    h = torch.randn(chunk_rows, weight.shape[1], device=device, dtype=weight.dtype, generator=generator)
    target = torch.randint(0, weight.shape[0], (chunk_rows,), device=device, generator=generator)
    try:
        timing = device_timing.measured(
            NAME,
            device,
            kind,
            lambda: eager(h, target),
            lambda: fused(h @ weight.T, bias, target, softcap, want_stats),
        )
    except Exception as error:  # a Triton or Inductor failure on this machine: the eager chunk, said once
        warn_once(f"turbotrain: the chunked head keeps its eager softmax and gradient: fusing them failed here "
                  f"({type(error).__name__}: {str(error)[:200]})")  # fmt: skip
        return None
    wins = timing.pass_ms <= timing.stock_ms
    logger.info(
        "turbotrain: chunked head on %s: softmax and gradient %s (fused %.3f ms, eager %.3f ms per %d-row chunk)",
        device,
        "fused by Inductor" if wins else "left eager",
        timing.pass_ms,
        timing.stock_ms,
        chunk_rows,
    )
    return fused if wins else None
