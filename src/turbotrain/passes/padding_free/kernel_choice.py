"""Which exact kernel (attention_kernels.py) a packed attention call runs through: measured on the device, once
per kind of call, and cached like the `auto` backend's choice.

Kind (`CallKind`): the device (its name: CUDA's device name, or the CPU's model), torch's and flash-attn's
versions, the model's attention ("sdpa" or "eager"), dtype, query heads, KV heads, head dim, causal, sliding
window, training or not, and the batch's shape bucket: rows, row capacity and mean sequence length, each rounded
up to a power of two.

Measured: where more than one kernel takes a call, each runs the call's own tensors (detached copies: the
model's graph never sees it; never under saved-tensor hooks, which gradient checkpointing uses to count what a
forward saves: such a call takes the first kernel in the order unmeasured, and a later call measures) forward and, in training, backward with one fixed output gradient; one warm-up,
then `REPEATS` timed runs (CUDA synchronised), the median kept. A kernel whose output (or gradients) differs from
`per_length`'s, the model's own function, by more than float rounding (1e-4 elementwise in fp32; where the call
computes in half precision, `PackedCall.compute_dtype`, 5e-2 of each tensor's largest value), compared with
attention dropout off (no two kernels draw the same mask; the timing keeps it), is dropped with a warning: only
exact kernels are candidates. The fastest wins where it beats the first in the preference order by `MARGIN`, else
that one (no flip-flopping on noise), unless that one measured slower than `row_mask` (`STOCK_PATH`: what stock +
`DataCollatorWithFlattening` runs, the model's own attention under a block-diagonal mask): then the fastest. So
where the row mask is tried, the choice is never slower than stock + flattening's attention on the call measured. The choice is logged once, kept for the
process (`CHOSEN`; `USED` counts the training calls each kernel took, which the run's summary names) and written to `$TURBOTRAIN_CACHE/packed_attention.json` for
later runs on this machine. Cost: a few forward/backward passes of one layer's attention per new kind. A kernel
that compiles (`COMPILED`: flex) read from the cache runs the call once, backward included, before a process
trusts it (its compile errors would otherwise surface in the step's backward, past any fallback).

`forced(name)`: a context in which every call takes kernel `name` where it applies (per_length elsewhere), for
benchmarks and tests. A kernel that raises (a build without it) is dropped for the process's calls of that device
type and compute dtype, with a warning, and the call takes the next.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch

from turbotrain.boundaries import torch_boundary
from turbotrain.passes.padding_free.attention_kernels import KERNELS, PackedCall, applicable, forcible
from turbotrain.utils.cache import device_name, digest, read_entry, write_entry
from turbotrain.utils.random_state import random_state_kept
from turbotrain.utils.warnings import warn_once

logger = logging.getLogger("turbotrain")

CACHE_FILE = "packed_attention.json"
REPEATS = 3
MARGIN = 1.10  # a kernel replaces the preferred one only when at least 10% faster
STOCK_PATH = "row_mask"  # stock + DataCollatorWithFlattening's way: the model's own attention, block-diagonal mask
HALF_TOLERANCE = 5e-2  # of a tensor's largest value: kernels agreeing in bf16/fp16 (the GPU check's parity bound)
CHOSEN: dict[CallKind, str] = {}
USED: dict[str, int] = {}  # kernel -> training calls it took in this process (the run's summary)
_failed: dict[str, set[tuple[str, str]]] = {}  # kernel -> the (device type, compute dtype) where it raised
_confirmed: set[tuple] = set()  # (compiled kernel, with backward, device type, compute dtype) that ran here
COMPILED = frozenset({"flex"})
_forced: list[str] = []


@dataclass(frozen=True)
class CallKind:
    device: str
    versions: str
    original: str
    dtype: str
    heads: int
    kv_heads: int
    head_dim: int
    causal: bool
    window: int | None
    training: bool
    rows: int
    capacity: int
    mean_length: int

    @classmethod
    def of(cls, call: PackedCall) -> CallKind:
        rows, heads, capacity, head_dim = call.query.shape
        groups = call.sequences.groups
        sequences = sum(count for count, _ in groups)
        mean = sum(count * length for count, length in groups) // max(sequences, 1)
        return cls(
            _cached_device_name(call.query.device), _versions(), call.original, str(call.compute_dtype).removeprefix("torch."),
            heads, call.key.shape[1], head_dim, bool(call.causal), call.window, bool(call.module.training),
            _bucket(rows), _bucket(capacity), _bucket(mean),
        )  # fmt: skip

    def key(self) -> str:
        return digest(*(f"{name}={value}" for name, value in asdict(self).items()))

    def line(self) -> str:
        return (f"{self.dtype}, {self.heads}/{self.kv_heads} heads of {self.head_dim}, "
                f"{'causal' if self.causal else 'bidirectional'}, ~{self.mean_length} tokens a sequence, "
                f"{self.rows} rows of ~{self.capacity}")  # fmt: skip


def _cached_device_name(device: torch.device) -> str:
    return _device_name(device.type, device.index)


@functools.cache  # CUDA's name is a driver call: once per device, not per attention call
def _device_name(kind: str, index: int | None) -> str:
    return device_name(torch.device(kind, index) if index is not None else torch.device(kind))


def _bucket(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


@functools.cache  # per layer per step otherwise (CallKind.of)
def _versions() -> str:
    from turbotrain.passes.padding_free.attention_kernels import installed

    flash = "none"
    if installed("flash_attn"):
        import flash_attn

        flash = getattr(flash_attn, "__version__", "?")
    return f"torch {torch.__version__}, flash-attn {flash}"


@contextlib.contextmanager
def forced(name: str) -> Iterator[None]:
    """Every call takes kernel `name` where it applies (per_length where it does not), inside the context."""
    if name not in KERNELS:
        raise ValueError(f"no packed attention kernel '{name}'; the kernels: {', '.join(KERNELS)}")
    _forced.append(name)
    try:
        yield
    finally:
        _forced.pop()


def attend(call: PackedCall) -> torch.Tensor:
    """[R * C, H, Dv]: `call` through its chosen kernel (the next one where that kernel raises)."""
    while True:
        name = _forced_kernel(call) or choose(call)
        try:
            out = KERNELS[name](call)
            if call.module is not None and call.module.training:
                USED[name] = USED.get(name, 0) + 1
            return out
        except Exception as error:
            if name == "per_length":
                raise  # the model's own function: its error is the model's
            _drop(name, error, call)


def _forced_kernel(call: PackedCall) -> str | None:
    if not _forced:
        return None
    return _forced[-1] if _forced[-1] in forcible(call, failed_for(call)) else "per_length"


def _scope(call: PackedCall) -> tuple[str, str]:
    return call.query.device.type, str(call.compute_dtype)


def failed_for(call: PackedCall) -> set[str]:
    """The kernels that raised in this process on calls of `call`'s device type and compute dtype (a kernel that
    cannot take fp32 calls, or one dtype's compile, is not dropped for the others)."""
    scope = _scope(call)
    return {name for name, scopes in _failed.items() if scope in scopes}


def _drop(name: str, error: Exception, call: PackedCall) -> None:
    _failed.setdefault(name, set()).add(_scope(call))
    for kind in [kind for kind, chosen in CHOSEN.items() if chosen == name]:
        del CHOSEN[kind]
    device, dtype = _scope(call)
    warn_once(f"turbotrain: packed attention's {name} kernel failed ({type(error).__name__}: {error}); the other "
              f"exact kernels take its {device} {dtype.removeprefix('torch.')} calls from now on")  # fmt: skip


def choose(call: PackedCall) -> str:
    """The kernel for `call`'s kind: remembered, cached on disk, or measured now."""
    names = applicable(call, failed_for(call))
    if len(names) == 1:
        return names[0]
    kind = CallKind.of(call)
    chosen = CHOSEN.get(kind)
    if chosen is None:
        cached = read_entry(CACHE_FILE, kind.key())
        chosen = _cached_choice(cached, names)
        if chosen not in names or (chosen in COMPILED and not _runs(call, chosen, kind.training)):
            if torch_boundary.saved_tensors_hooks_active():  # checkpointing counts saved tensors: measure later
                return names[0]
            chosen = _measure(call, kind, applicable(call, failed_for(call)))
        CHOSEN[kind] = chosen
    return chosen if chosen in names else names[0]


def _cached_choice(entry, names: list[str]) -> str | None:
    """The kernel a cache entry names, chosen again by today's rule (`fastest_exact`) from its timings where they
    cover it (an entry written by an earlier release may have kept a kernel slower than the row mask)."""
    if not isinstance(entry, dict):
        return None
    timings = {name: ms / 1e3 for name, ms in (entry.get("ms") or {}).items() if isinstance(ms, (int, float))}
    if entry.get("kernel") in names and any(name in timings for name in names):
        return fastest_exact(timings, names)
    return entry.get("kernel")


def _runs(call: PackedCall, name: str, training: bool) -> bool:
    """Whether a kernel that compiles (`COMPILED`), chosen by an earlier process, runs here, backward included: its
    compile errors surface in the first call (in the step's backward otherwise, past any fallback); one that
    fails is dropped with a warning. Not tried under saved-tensor hooks (the caller measures later)."""
    if (name, training, *_scope(call)) in _confirmed:
        return True
    if torch_boundary.saved_tensors_hooks_active():
        return False
    try:
        with random_state_kept(call.query.device):
            _run_once(call, name, training)
    except Exception as error:
        _drop(name, error, call)
        return False
    _confirmed.add((name, training, *_scope(call)))
    return True


def _measure(call: PackedCall, kind: CallKind, names: list[str]) -> str:
    timings = timed_kernels(call, names, kind.training, kind.line())
    chosen = fastest_exact(timings, names)
    times = ", ".join(f"{name} {seconds * 1e3:.2f} ms" for name, seconds in sorted(timings.items(), key=lambda x: x[1]))
    logger.info("turbotrain: packed attention for %s: %s (measured: %s)", kind.line(), chosen, times)
    write_entry(CACHE_FILE, kind.key(), {"kernel": chosen, "ms": {n: s * 1e3 for n, s in timings.items()},
                                         "kind": asdict(kind)})  # fmt: skip
    return chosen


def fastest_exact(timings: dict[str, float], names: list[str]) -> str:
    """The choice among `names` from their `timings` (the exact ones): the fastest where it beats the first of
    `names` timed by `MARGIN`, else that one; but never one slower than `STOCK_PATH` where that was timed among
    `names` (the margin keeps turbotrain's preference among its own kernels, never against stock's way)."""
    timed = {name: seconds for name, seconds in timings.items() if name in names}
    preferred = next(name for name in names if name in timed)
    fastest = min(timed, key=timed.get)
    chosen = fastest if timed[fastest] * MARGIN < timed[preferred] else preferred
    if STOCK_PATH in timed and timed[chosen] > timed[STOCK_PATH]:
        return fastest
    return chosen


def timed_kernels(call: PackedCall, names: list[str], training: bool, what: str = "these calls") -> dict[str, float]:
    """Kernel name -> median seconds of `call` through it (forward, and backward in `training`), for each of
    `names` that agrees with per_length (always measured first: the reference); the others are warned about.
    The run's random numbers are as before (the timing's dropout draws are forked off: a reentrant checkpoint's
    recompute would otherwise draw other masks than its forward did)."""
    with random_state_kept(call.query.device):
        return _timed_kernels(call, names, training, what)


def _timed_kernels(call: PackedCall, names: list[str], training: bool, what: str) -> dict[str, float]:
    reference = None
    timings: dict[str, float] = {}
    formula = call.without_dropout()  # compared without dropout (no two kernels draw alike), timed with it
    for name in ["per_length", *(n for n in names if n != "per_length")]:
        try:
            result = _run_once(formula, name, training)
            if reference is None:
                reference = result
            elif not _agrees(result, reference, call.compute_dtype):
                warn_once(f"turbotrain: packed attention's {name} kernel disagrees with the model's own attention "
                          f"({what}); it is not used for such calls")  # fmt: skip
                continue
            timings[name] = _median_seconds(call, name, training)
            _confirmed.add((name, training, *_scope(call)))
        except Exception as error:
            if name == "per_length":
                raise
            _drop(name, error, call)
    return timings


def _copies(call: PackedCall, training: bool) -> PackedCall:
    return call.with_tensors(*(x.detach().clone().requires_grad_(training) for x in (call.query, call.key, call.value)))


def _run_once(call: PackedCall, name: str, training: bool) -> list[torch.Tensor]:
    """The kernel's output on copies of the call's tensors, and in training their gradients for one fixed
    output gradient (seeded: the same for every kernel)."""
    copies = _copies(call, training)
    with torch.enable_grad() if training else torch.no_grad():
        out = KERNELS[name](copies)
        if not training:
            return [out.detach()]
        generator = torch.Generator(device=out.device).manual_seed(0)
        grad = torch.randn(out.shape, generator=generator, device=out.device, dtype=out.dtype)
        inputs = (copies.query, copies.key, copies.value)
        return [out.detach(), *torch.autograd.grad(out, inputs, grad, allow_unused=True)]


def _agrees(got: list, expected: list, dtype: torch.dtype) -> bool:
    """Whether a kernel's output and gradients are per_length's to float rounding: in fp32 element by element
    (1e-4); in half precision the largest difference within `HALF_TOLERANCE` of the tensor's largest value (bf16
    keeps 8 bits, so sums over hundreds of keys differ elementwise by several of its steps between two exact
    kernels). That bound catches wrong key sets that move outputs by their own size (causality, segments, rows'
    tails, a sequence's first queries), not a window one key off (about 1/L of an output): the CUDA tests against
    padded stock (tests/passes/test_packed_attention_cuda.py) hold the windows."""
    return all(_same(a, b, dtype) for a, b in zip(got, expected))


def _same(a: torch.Tensor | None, b: torch.Tensor | None, dtype: torch.dtype) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = a.float(), b.float()
    if dtype == torch.float32:
        return torch.allclose(a, b, rtol=1e-4, atol=1e-4)
    return bool((a - b).abs().max() <= HALF_TOLERANCE * b.abs().max().clamp_min(1e-6))


def _median_seconds(call: PackedCall, name: str, training: bool) -> float:
    _run_once(call, name, training)  # warm-up
    seconds = []
    for _ in range(REPEATS):
        _synchronize(call.query.device)
        start = time.perf_counter()
        _run_once(call, name, training)
        _synchronize(call.query.device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def chosen_kernels() -> list[str]:
    """The kernels that took this process's packed training calls so far, most used first (the run's summary)."""
    return sorted(USED, key=lambda name: -USED[name])
