"""The chunked head's softmax and gradient in one fused kernel on CUDA, where a timing on the device says it wins.

Per chunk the SFT op (chunked_ce/__init__.py `_chunk`) turns the logits [C, V] of one matmul into the rows' NLL
and dz = softmax(z) - onehot(target) with eager torch ops: the upcast to fp32, the log-sum-exp, the gather, the
exp, the one-hot subtraction, the downcast (and with TRL's statistics an arg-max and a second fp32 [C, V] for
the entropy). Each is a pass over [C, V] in memory, ~40 bytes per logit in all, against the 6·H FLOPs per logit
of the chunk's three matmuls: at H = 896 (Qwen2.5-0.5B) on an H100 (989 TFLOP/s bf16, 3.35 TB/s) the passes
take about twice the matmuls' time, and the fp32 copies are the chunk's peak memory (~8·C·V bytes: 2.5 GB at
C = 2,048 and V = 151,936).

`softmax_gradient(logits, bias, target, softcap, want_stats)` is the same arithmetic as functions of the
matmul's output: z = fp32(logits) (+ fp32 bias), soft-capped if asked, log-sum-exp, nll = lse - z[target]
(with `want_stats`, entropy = lse - Σ p·z and whether the target is the arg-max), then p = exp(z - lse),
dz = p - onehot(target) (times 1 - tanh² under soft-capping) in the logits' dtype. Compiled by Inductor
(dynamic row counts: one graph for every chunk and batch), they become a few reductions and one elementwise
kernel that read the half logits and write the half dz in their place: ~10 bytes per logit and no fp32 [C, V]
tensor (2·C·V bytes at the peak, 622 MB at C = 2,048 and V = 151,936; soft-capping keeps one fp32 [C, V], its
tanh).

The per-row op of DPO, KTO, GRPO and RLOO (chunked_ce/logprobs.py) gets the same treatment in two functions:
`log_prob_stats` (its forward: lse, nll and TRL's statistics of the capped, temperature-scaled logits, rows
only, no [C, V] output) and `weighted_gradient` (dz of any per-row weight, from the forward's lse: its backward's
recomputed chunk, and a frozen head's unit gradient in the forward), dz again in place of the logits. A trained
bias keeps the eager backward (its gradient is an fp32 sum of dz, which the fused chunk hands over in the half
dtype).

Exact: the same fp32 formulas per element as the eager chunks; the reductions differ in order and method
(Inductor's online log-sum-exp; the per-row entropy from exp(z - lse) where the eager one calls softmax): float
rounding only (tests/passes/test_fused_epilogue*.py compare them, once through the CPU's Inductor).

When (`applies`, `chosen`): on CUDA with Triton (Inductor's GPU code generator), outside a compiled region (there
the whole head is Inductor's already), for at most `MAX_FUSED_KINDS` kinds of call a process (torch's recompile
limit), never on the CPU (whose op is the one measured in benchmarks/).
The first call of each kind (which chunk: the SFT op's, the per-row forward or backward; vocabulary, hidden
size, dtype, autocast, chunk rows, soft-cap, temperature, bias, statistics, which gradients) times one chunk
both ways without gradients, as the ops run them (passes/device_timing.py `measured`: the compile in the
untimed warm-up, medians of 5 alternating, cached in `pass_timing.json`), and the fused kernel answers where it
was at most as slow; the choice is logged once with both times. If the compile or the timing raises, the eager
chunk answers, said once in a warning naming the error.
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

NAME = "chunked head, fused by Inductor"
# Dynamo compiles a function again for each new dtype, soft-cap, temperature, statistics flag or None argument (and
# once more for a one-row chunk), up to torch's recompile limit (8), past which it runs the function uncompiled:
# correct, but holding fp32 [C, V] copies. Each kind of call fused takes at most two graphs of each function.
MAX_FUSED_KINDS = 4
MIN_ROWS = 2  # a chunk of fewer rows runs eager (Dynamo would compile a 1-row graph of its own)
_chosen: dict[tuple, bool] = {}


def softmax_gradient(logits, bias, target, softcap: float | None, want_stats: bool):
    """(nll [C] fp32, dz [C, V] in the logits' dtype, entropy [C] or None, is_top1 [C] or None) of one chunk's
    logits [C, V] (the head's matmul output; bias [V] or None added in fp32, as the eager chunk does): the SFT
    op's chunk as two compiled functions, the rows' reductions (`log_prob_stats`) and then dz written in place
    of the logits (`weighted_gradient`; `logits` itself is returned), so a chunk holds one [C, V] tensor. (One
    compiled function for both made Inductor write dz to a second [C, V] buffer first wherever the statistics
    read the logits too.)"""
    lse, nll, entropy, is_top1, _ = compiled(log_prob_stats)(logits, bias, target, softcap, 1.0, want_stats)
    dz = compiled(weighted_gradient)(logits, bias, lse, target, None, softcap, 1.0)
    return nll, dz, entropy, is_top1


def log_prob_stats(logits, bias, target, softcap: float | None, inv_t: float, want_stats: bool):
    """(lse [C], nll [C], entropy, is_top1, mean logit [C] or None each) of one chunk's logits [C, V] for the
    per-row op (chunked_ce/logprobs.py): soft-capped, then times `inv_t`, as its eager forward; no [C, V] output."""
    z, _ = _scaled(logits, bias, softcap, inv_t)
    lse = torch.logsumexp(z, dim=1)
    nll = lse - z.gather(1, target[:, None]).squeeze(1)
    if not want_stats:
        return lse, nll, None, None, None
    entropy = lse - (torch.exp(z - lse[:, None]) * z).sum(dim=1)
    return lse, nll, entropy, z.argmax(dim=1) == target, z.mean(dim=1)


def weighted_gradient(logits, bias, lse, target, row_weight, softcap: float | None, inv_t: float):
    """dz [C, V] = row_weight [C] (or 1 where None) · (softmax(z) - onehot(target)) · inv_t (· (1 - tanh²) under
    soft-capping): the per-row op's gradient of the logits, from its forward's lse [C], written in place of the
    logits, in their dtype (the dtype the head's matmuls run in)."""
    z, tanh = _scaled(logits, bias, softcap, inv_t)
    probs = torch.exp(z - lse[:, None])
    columns = torch.arange(z.shape[1], device=z.device)
    dz = torch.where(columns[None, :] == target[:, None], probs - 1, probs)
    dz = dz * inv_t  # unconditionally (one graph for every temperature); times 1.0 changes nothing
    if tanh is not None:
        dz = dz * (1 - tanh * tanh)
    if row_weight is not None:
        dz = dz * row_weight.float()[:, None]
    return logits.copy_(dz)


def _scaled(logits, bias, softcap, inv_t: float = 1.0):
    """(z fp32, tanh or None): the logits plus bias in fp32, soft-capped, times `inv_t` (logprobs.head_logits)."""
    z = logits.float()
    if bias is not None:
        z = z + bias.float()
    tanh = None
    if softcap:
        tanh = torch.tanh(z / softcap)
        z = tanh * softcap
    return z * inv_t, tanh  # unconditionally (one graph for every temperature); times 1.0 changes nothing


@functools.cache
def compiled(function: Callable) -> Callable:
    """`function` through Inductor, one graph for any number of rows (2 and up: Dynamo specialises a 1-row
    chunk, which the ops run eager, `MIN_ROWS`), called with autocast off (elementwise work only; Dynamo guards
    on autocast's state, which differs between the ops' forward and backward)."""
    graph = torch.compile(function, dynamic=True)

    @functools.wraps(function)
    def run(logits, *args):
        with torch.autocast(logits.device.type, enabled=False):
            return graph(logits, *args)

    return run


def compiles_on(device: torch.device) -> bool:
    """Whether Inductor builds GPU kernels for `device` here: CUDA with Triton."""
    return device.type == "cuda" and torch_boundary.has_triton()


def applies(device: torch.device) -> bool:
    """Whether a fused function is a candidate here: a timed device with Inductor's GPU kernels, and not inside
    a compiled region (there the whole head is Inductor's already)."""
    return device_timing.timed_on(device) and not torch.compiler.is_compiling() and compiles_on(device)


def fused_for(device, weight, bias, chunk_rows: int, softcap, want_stats: bool, eager: Callable) -> Callable | None:
    """The SFT op's fused softmax and gradient for this head's chunks on `device`, or None (the eager chunk) where
    it does not apply or measured slower; `weight` [V, H] as the chunk loop multiplies it (in the compute dtype),
    `eager(h, target)` one eager chunk (its matmul included, as the fused chunk's is)."""
    if not applies(device):
        return None

    def steps(h, target):
        return lambda: eager(h, target), lambda: softmax_gradient(h @ weight.T, bias, target, softcap, want_stats)

    kind = (*weight.shape, str(weight.dtype), chunk_rows, softcap or 0.0, bias is not None, want_stats)
    return softmax_gradient if chosen("softmax and gradient", device, weight, chunk_rows, kind, steps) else None


def chosen(what: str, device, weight, chunk_rows: int, kind: tuple, steps: Callable) -> bool:
    """Whether the fused `what` measured at most as slow as the eager one for this kind of call, timed once
    (`steps(h, target)`: the eager and the fused zero-argument steps on random rows [chunk_rows, H] in the
    weight's dtype); False, said once, where the compile or the timing raised."""
    key = (what, *kind)
    if key not in _chosen:
        if sum(_chosen.values()) >= MAX_FUSED_KINDS:
            logger.info(
                "turbotrain: chunked head: %s left eager (%d kinds of call fused already)", what, MAX_FUSED_KINDS
            )
            _chosen[key] = False
        else:
            _chosen[key] = _measured(what, device, weight, chunk_rows, key, steps)
    return _chosen[key]


def _measured(what, device, weight, chunk_rows, key, steps) -> bool:
    rows = max(MIN_ROWS, chunk_rows // 4)  # the eager step's fp32 copies (~8 bytes a logit) stay under a fused
    # chunk's own half logits (2 bytes a logit): the first step's peak memory is the run's
    generator = device_timing.generator(device)
    h = torch.randn(rows, weight.shape[1], device=device, dtype=weight.dtype, generator=generator)
    target = torch.randint(0, weight.shape[0], (rows,), device=device, generator=generator)
    eager, fused = (_without_grad(step) for step in steps(h, target))  # as the op's forward and backward run
    try:
        fused()  # the compile, also where the timing comes from the cache: a failure is caught here, not in a step
        timing = device_timing.measured(NAME, device, key, eager, fused)
    except Exception as error:  # a Triton or Inductor failure on this machine: the eager chunk, said once
        warn_once(f"turbotrain: the chunked head keeps its eager {what}: fusing it failed here "
                  f"({type(error).__name__}: {str(error)[:200]})")  # fmt: skip
        return False
    wins = timing.pass_ms <= timing.stock_ms
    logger.info(
        "turbotrain: chunked head on %s: %s %s (fused %.3f ms, eager %.3f ms per %d rows)",
        device,
        what,
        "fused by Inductor" if wins else "left eager",
        timing.pass_ms,
        timing.stock_ms,
        rows,
    )
    return wins


def _without_grad(step: Callable) -> Callable:
    def run():
        with torch.no_grad():
            step()

    return run
