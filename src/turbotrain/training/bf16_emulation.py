"""bf16 matmuls emulated in fp32 GEMMs, for CPU autocast on a CPU without bf16 matmul units.

Without `amx_bf16`/`avx512_bf16` (utils/cpu.py), torch's CPU autocast runs bf16 matmuls in a slow
fallback (a [220×256]·[256×151,936] head matmul: 1.36 s under bf16 autocast, 0.23 s in fp32 on a Zen 3
EPYC). bf16 hardware computes a matmul as an fp32-accumulated product of bf16 inputs, rounded to bf16 once.
`Bf16Emulation` computes exactly that with fp32 GEMMs: inputs rounded to bf16 (`x.to(bfloat16)`, as
autocast casts them), multiplied as fp32, the output rounded to bf16 (0.39 s for the matmul above). Only
the summation order differs from torch's fallback, so each output element equals stock autocast's to
within one bf16 ulp (tests/test_bf16_emulation.py checks every element).

The ops (`EMULATED`): `F.linear`, `torch.matmul`/`@`, `mm`, `bmm`, `addmm`, `baddbmm` (function and method
forms), with both operands at least 2-D and no `out=`. The backward is done the same way: the bf16
output gradient, fp32 GEMMs against the saved bf16 operands, each input gradient rounded to bf16 and then
cast to the input's dtype by the bf16 cast's own backward (what autocast's cast gives). The saved operands
are the bf16 copies (half the memory of fp32 ones), as under autocast.

Not emulated, on purpose: `scaled_dot_product_attention` (its CPU flash kernel runs bf16 at ~fp32 speed
here: 9.4 vs 7.5 ms for 8×4×300×64, measured) and convolutions (oneDNN's path; models this targets have
none). Everything else autocast does is untouched: it still runs, casts and caches as stock.

Why a `TorchFunctionMode`, not kernels registered for the AutocastCPU dispatch key: the mode sees each
call before autocast does and needs no private torch name; it reads autocast's state
(`torch.is_autocast_enabled("cpu")`, `torch.get_autocast_dtype("cpu")`) and, for a matmul-class call on
fp32/bf16 CPU tensors, returns `EmulatedMatmul`'s result, else lets the call through untouched. An
AutocastCPU kernel would also catch matmuls made inside C++ ops, but it replaces torch's own autocast
kernel process-wide (torch warns on the override), and its off switch would have to re-implement autocast's
cast. The mode costs a Python call per torch function while it is entered (a few µs; the steps it is
for take seconds). The trainer enters it around `training_step` (forward and backward) and `prediction_step`.

Gradient checkpointing recomputes a layer's forward inside the backward, and the autograd engine keeps the torch
function mode stack it started with for the whole backward. torch runs a mode's handler with that mode popped, so a
`loss.backward()` called inside the mode (which the mode sees: `Tensor.backward` is a torch function) would start
the engine without it, and the recomputation would run stock autocast against an emulated forward (other saved
tensors: non-reentrant checkpointing refuses the step; reentrant gets other numbers). The mode therefore answers
`Tensor.backward` and `torch.autograd.backward` itself: it puts itself back on the stack and starts the engine
past torch's `__torch_function__` check (`torch_boundary.run_backward`), so the recomputation is emulated as its
forward was, reentrant or not. Forms it leaves to torch (gradient edges, a dict of `inputs`) and
`torch.autograd.grad` run as before: without the mode in their backward.

Within one entry of the mode, a leaf tensor's (a parameter's) bf16 copy and its rounded fp32 copy are
cached, as autocast caches casts, so the chunked head's per-chunk matmuls round the head's weight once (its
`weight.T` too: a leaf's transpose is answered from the leaf's copies). A copy
cast under `no_grad` (reentrant checkpointing runs its forward so) is not used where grad is on: it would
leave the parameter without a gradient.

Where no graph is recorded (the chunked head's per-chunk matmuls run under no_grad inside its op), a contiguous
non-leaf operand is rounded, and a 2-D GEMM's fp32 product written, into buffers reused from earlier calls by shape
(`_SCRATCH`: never twice in one call; the logits' fp32 buffer serves the next matmul's rounded logit gradient) instead
of fresh [rows × vocab] tensors each chunk: `copy_` rounds as `.to` does, so the bits are the same; outputs are still
fresh. The buffers are dropped when a backward starts and at exit.

`decide(setting)`: 'off' never; 'on' always (also where units exist: for tests); 'auto' only where the
CPU has no bf16 units and a short probe (`probe()`, ~0.2 s once per process) finds the emulated matmul
faster than stock's bf16 one.
"""

from __future__ import annotations

import functools
import inspect
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from turbotrain.boundaries.torch_boundary import run_backward, tensor_version, view_base
from turbotrain.utils.cpu import BF16_UNITS, cap_note, cpu_model, matmul_flags

BF16 = torch.bfloat16
SETTINGS = ("auto", "on", "off")
SUMMARY = "bf16 emulated in fp32 GEMMs: this CPU has no bf16 units"


@dataclass(frozen=True)
class Bf16EmulationOptions:
    """The emulation's option, a field of `TurboOptions` (args.py), checked once there (`check`)."""

    bf16_emulation: str = field(
        default="auto",
        metadata={
            "help": "A bf16 run on a CPU: 'auto' runs autocast's bf16 matmuls as fp32 GEMMs on bf16-rounded inputs, "
            "output rounded to bf16, where the CPU has no bf16 units (no amx_bf16/avx512_bf16) and a short probe "
            "finds it faster; 'on' always, 'off' never (bf16_emulation.py)."
        },
    )

    @classmethod
    def check(cls, values) -> None:
        if values.bf16_emulation not in SETTINGS:
            raise ValueError(f"bf16_emulation must be one of {SETTINGS}, got {values.bf16_emulation!r}")


# --- the op ------------------------------------------------------------------------------------------


def _sum_to(t: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    return t if t.shape == shape else t.sum_to_size(shape)


class EmulatedMatmul(torch.autograd.Function):
    """bf16(alpha · a@b + beta · c) from fp32 GEMMs: `a`, `b`, `c` are bf16 (c may be None); `a32`, `b32` are the
    fp32 values of `a`, `b` (given so a cached copy can be used). Output bf16; input gradients bf16."""

    @staticmethod
    def forward(ctx, a, b, c, alpha, beta, a32, b32):
        with torch.autocast("cpu", enabled=False):  # the fp32 GEMM must not be cast back to bf16
            out = _product(a32, b32)
            if alpha != 1:
                out.mul_(alpha)
            if c is not None:
                out.add_(c.float(), alpha=beta)
        ctx.save_for_backward(a, b)
        ctx.scales = (alpha, beta)
        ctx.c_shape = c.shape if c is not None else None
        return out.to(BF16)

    @staticmethod
    def backward(ctx, grad):
        with torch.autocast("cpu", enabled=False):
            return EmulatedMatmul._backward(ctx, grad)

    @staticmethod
    def _backward(ctx, grad):
        a, b = ctx.saved_tensors
        alpha, beta = ctx.scales
        g = grad.to(BF16).float()
        ga = gb = gc = None
        if ctx.needs_input_grad[0]:
            ga = _sum_to(torch.matmul(g, _fp32(b).mT), a.shape)
            ga = (ga.mul_(alpha) if alpha != 1 else ga).to(BF16)
        if ctx.needs_input_grad[1]:
            gb = _weight_grad(a, g, b.shape)
            gb = (gb.mul_(alpha) if alpha != 1 else gb).to(BF16)
        if ctx.c_shape is not None and ctx.needs_input_grad[2]:
            gc = (_sum_to(g, ctx.c_shape) * beta).to(BF16)
        return ga, gb, gc, None, None, None, None


def _product(a32: torch.Tensor, b32: torch.Tensor) -> torch.Tensor:
    """a32 @ b32; where no graph is recorded and both are 2-D, into a reused buffer (the output is read only to
    round it to bf16, and fresh pages for a chunk's [rows × vocab] logits cost more than the rounding)."""
    if torch.is_grad_enabled() or a32.dim() != 2 or b32.dim() != 2:
        return torch.matmul(a32, b32)
    return torch.mm(a32, b32, out=_scratch((a32.shape[0], b32.shape[1]), torch.float32))


def _weight_grad(a: torch.Tensor, g: torch.Tensor, b_shape: torch.Size) -> torch.Tensor:
    """aᵀ·g summed to b's shape; a 2-D b (a linear's weight) as one GEMM over every row, not one per batch."""
    if len(b_shape) == 2 and a.dim() > 2:
        return a.float().reshape(-1, a.shape[-1]).T @ g.reshape(-1, g.shape[-1])
    return _sum_to(torch.matmul(_fp32(a).mT, g), b_shape)


# --- the mode ----------------------------------------------------------------------------------------

_CACHE: dict[int, tuple[torch.Tensor, int, torch.Tensor, torch.Tensor]] = {}  # id(leaf) -> (leaf, version, bf16, fp32)
_FP32_OF: dict[int, torch.Tensor] = {}  # id(cached bf16 copy) -> its fp32 values
_SCRATCH: dict[tuple[torch.dtype, tuple[int, ...]], list[torch.Tensor]] = {}  # (dtype, row shape) -> free buffers
_TAKEN: set[int] = set()  # ids of the buffers the current call has handed out


def _scratch(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A contiguous buffer of `shape`, reused across calls: one call never gets the same buffer twice, the next one
    may get it again (a chunk's fp32 logits buffer serves the next matmul's rounded logit gradient, the same [rows, V]
    fp32 shape). Buffers of another row count with the same row shape are dropped first (the last, shorter chunk).
    Only for values no graph keeps: used where grad is off, dropped when a backward starts and at exit."""
    key = (dtype, tuple(shape[1:]))
    buffers = [b for b in _SCRATCH.get(key, ()) if b.shape == shape]  # the others freed before a new one is made
    _SCRATCH[key] = buffers
    free = next((b for b in buffers if id(b) not in _TAKEN), None)
    if free is None:
        free = torch.empty(shape, dtype=dtype)
        buffers.append(free)
    _TAKEN.add(id(free))
    return free


def _fp32(t: torch.Tensor) -> torch.Tensor:
    cached = _FP32_OF.get(id(t))
    return cached if cached is not None else t.float()


def _round(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(bf16 copy of `t` as autocast casts it, its fp32 values); leaves cached while the mode is entered (a leaf's
    transpose answered from the leaf's copies); other contiguous operands rounded into reused buffers where no graph
    is recorded (nothing keeps them)."""
    base = view_base(t)
    if base is None and t.is_leaf and t.requires_grad:
        return _round_leaf(t)
    if base is not None and _transpose_of(t, base) and base.is_leaf and base.requires_grad:
        low, high = _round_leaf(base)  # the chunked head's `h @ weight.T` under no_grad: the head rounded once
        return low.mT, high.mT
    if not torch.is_grad_enabled() and t.is_contiguous():
        low = t if t.dtype == BF16 else _scratch(t.shape, BF16).copy_(t)  # copy_ rounds as .to(bf16) does
        return low, _scratch(t.shape, torch.float32).copy_(low)
    low = t.to(BF16)
    return low, low.detach().float()


def _round_leaf(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A leaf's (parameter's) copies, cast once per entry of the mode and version, as autocast caches its casts. Only
    tensors that own their storage are cached (autocast skips views too): under no_grad a view of a parameter is a
    leaf that requires grad, and caching each `weight.T` made per call kept a whole rounded head per call alive."""
    hit = _CACHE.get(id(t))
    # a copy cast under no_grad (reentrant checkpointing's forward) has no graph: recast where grad is on
    if hit is not None and hit[0] is t and hit[1] == tensor_version(t) and _connected(hit[2]):
        return hit[2], hit[3]
    if hit is not None:  # replaced: its bf16 copy may be freed and its id reused
        _FP32_OF.pop(id(hit[2]), None)
    low = t.to(BF16)
    high = low.detach().float()
    _CACHE[id(t)] = (t, tensor_version(t), low, high)
    _FP32_OF[id(low)] = high
    return low, high


def _transpose_of(t: torch.Tensor, base: torch.Tensor) -> bool:
    """Whether `t` is exactly the 2-D `base` transposed (same storage place, swapped shape and strides)."""
    return (
        t.dim() == 2
        and base.dim() == 2
        and t.dtype == base.dtype
        and t.storage_offset() == base.storage_offset()
        and t.shape == base.shape[::-1]
        and t.stride() == base.stride()[::-1]
    )


def _connected(copy: torch.Tensor) -> bool:
    """Whether a cached copy serves this call: it carries the graph back to its leaf, or no graph is recorded now."""
    return copy.requires_grad or not torch.is_grad_enabled()


def _tensor(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dtype in (torch.float32, BF16)


def _matmul_args(func, args, kwargs):
    """(a, b, c, alpha, beta, transpose_b) of an emulated call, or None to let it through."""
    if kwargs.get("out") is not None:
        return None
    if func in _LINEAR:
        x, w = args[0], args[1] if len(args) > 1 else kwargs.get("weight")
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        return x, w, bias, 1, 1, True
    if func in _PRODUCTS:
        a, b = args[0], args[1] if len(args) > 1 else kwargs.get("other", kwargs.get("mat2"))
        return (b, a, None, 1, 1, False) if func is _RMATMUL else (a, b, None, 1, 1, False)
    if func in _ADDS:
        c, a, b = args[0], args[1], args[2]
        rest = list(args[3:])
        beta = kwargs.get("beta", rest.pop(0) if rest else 1)
        alpha = kwargs.get("alpha", rest.pop(0) if rest else 1)
        return a, b, c, alpha, beta, False
    return None


def emulated(func, args, kwargs):
    """The emulated result of `func(*args, **kwargs)`, or None where it is not a call this emulates."""
    parsed = _matmul_args(func, args, kwargs or {})
    if parsed is None:
        return None
    a, b, c, alpha, beta, transpose_b = parsed
    if not (_tensor(a) and _tensor(b) and (c is None or _tensor(c))) or a.dim() < 2 or b.dim() < 2:
        return None
    _TAKEN.clear()  # the buffers the last call used are free again
    a16, a32 = _round(a)
    b16, b32 = _round(b)
    if transpose_b:
        b16, b32 = b16.t(), b32.t()
    c16 = c.to(BF16) if c is not None else None
    if transpose_b and c16 is not None and not _linear_fuses_bias(a16):
        return EmulatedMatmul.apply(a16, b16, None, 1, 1, a32, b32) + c16  # torch's linear: matmul, then add
    return EmulatedMatmul.apply(a16, b16, c16, alpha, beta, a32, b32)


def _linear_fuses_bias(x16: torch.Tensor) -> bool:
    """Whether torch's `linear` adds the bias inside the GEMM (one rounding) for this bf16 input: a 2-D input or a
    contiguous 3-D one (aten's linear); otherwise it rounds the product, then adds the bias in bf16."""
    return x16.dim() == 2 or (x16.dim() == 3 and x16.is_contiguous())


def _as_tuple(value) -> tuple:
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)


def backward_arguments(func, args, kwargs) -> tuple | None:
    """(tensors, grad_tensors, retain_graph, create_graph, inputs) of a `Tensor.backward` or
    `torch.autograd.backward` call, as tuples the way torch makes them; None for the forms left to torch itself
    (gradient edges, a dict of inputs, the deprecated `grad_variables`, empty `inputs`)."""
    bound = inspect.signature(func).bind(*args, **(kwargs or {}))
    bound.apply_defaults()
    named = bound.arguments
    if func is torch.Tensor.backward:
        tensors, grads = (named["self"],), named["gradient"]
    elif named.get("grad_variables") is not None:
        return None
    else:
        tensors, grads = named["tensors"], named["grad_tensors"]
    inputs = named["inputs"]
    if isinstance(inputs, dict) or (inputs is not None and not _as_tuple(inputs)):
        return None
    tensors = _as_tuple(tensors)
    inputs = () if inputs is None else _as_tuple(inputs)
    if not all(isinstance(t, torch.Tensor) for t in (*tensors, *inputs)):
        return None
    grads = (None,) * len(tensors) if grads is None else _as_tuple(grads)
    create = bool(named["create_graph"])
    retain = create if named["retain_graph"] is None else named["retain_graph"]
    return tensors, grads, retain, create, inputs


class Bf16Emulation(TorchFunctionMode):
    """While entered, CPU bf16 autocast's matmul-class calls run as `EmulatedMatmul` (module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _BACKWARDS:
            called = backward_arguments(func, args, kwargs)
            if called is not None:
                return self._backward(*called)
        if func in _ALL and torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == BF16:
            result = emulated(func, args, kwargs)
            if result is not None:
                return result
        return func(*args, **(kwargs or {}))

    def _backward(self, tensors, grads, retain_graph, create_graph, inputs) -> None:
        """The backward with this mode back on the stack. torch runs a mode's handler with the mode popped, and the
        autograd engine keeps the mode stack it starts with for the whole backward: started from here as
        `func(...)`, gradient checkpointing's recomputation (which runs inside the backward) would run stock
        autocast against an emulated forward (other saved tensors: torch's checkpoint refuses them)."""
        _SCRATCH.clear()  # the forward's buffers: not held through the backward
        _TAKEN.clear()
        TorchFunctionMode.__enter__(self)  # the base's push, not this class's __exit__ (which clears the caches)
        try:
            run_backward(tensors, grads, retain_graph, create_graph, inputs)
        finally:
            TorchFunctionMode.__exit__(self, None, None, None)

    def __exit__(self, *exc):
        _CACHE.clear()
        _FP32_OF.clear()
        _SCRATCH.clear()
        _TAKEN.clear()
        return super().__exit__(*exc)


_LINEAR = {F.linear}
_RMATMUL = torch.Tensor.__rmatmul__
_PRODUCTS = {
    torch.matmul,
    torch.Tensor.matmul,
    torch.Tensor.__matmul__,
    _RMATMUL,
    torch.mm,
    torch.Tensor.mm,
    torch.bmm,
    torch.Tensor.bmm,
}
_ADDS = {torch.addmm, torch.Tensor.addmm, torch.baddbmm, torch.Tensor.baddbmm}
_ALL = _LINEAR | _PRODUCTS | _ADDS
_BACKWARDS = {torch.Tensor.backward, torch.autograd.backward}


# --- the decision ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """Seconds of one [rows×hidden]·[hidden×out] matmul: fp32, stock bf16 autocast, emulated."""

    fp32: float
    autocast_bf16: float
    emulated: float
    shape: tuple[int, int, int]

    def gflops(self, seconds: float) -> float:
        m, k, n = self.shape
        return 2 * m * k * n / seconds / 1e9


def _best(call, repeats: int) -> float:
    call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


@functools.lru_cache(maxsize=1)
def probe(rows: int = 128, hidden: int = 256, out: int = 2048, repeats: int = 3) -> Probe:
    """Time the three ways once per process (~0.2 s on a 2-core Zen 3)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, hidden, generator=generator)
    w = torch.randn(out, hidden, generator=generator)

    def stock():
        with torch.autocast("cpu", BF16):
            F.linear(x, w)

    def emulate():
        with torch.autocast("cpu", BF16), Bf16Emulation():
            F.linear(x, w)

    fp32 = _best(lambda: F.linear(x, w), repeats)
    return Probe(fp32, _best(stock, repeats), _best(emulate, repeats), (rows, hidden, out))


def has_bf16_units(flags: frozenset[str] | None = None) -> bool:
    """Whether oneDNN can run bf16 matmuls on units (utils/cpu.py: the flags, under `ONEDNN_MAX_CPU_ISA`)."""
    return any(flag in BF16_UNITS for flag in matmul_flags(flags))


def decide(setting: str, flags: frozenset[str] | None = None, measure=probe) -> tuple[bool, Probe | None]:
    """(emulate?, the probe behind an 'auto' choice or None); flags and the probe injectable for tests."""
    if setting not in SETTINGS:
        raise ValueError(f"bf16_emulation must be one of {SETTINGS}, got {setting!r}")
    if setting != "auto":
        return setting == "on", None
    if has_bf16_units(flags):
        return False, None
    measured = measure()
    return measured.emulated < measured.autocast_bf16, measured


def decision_line(on: bool, measured: Probe | None, setting: str = "auto") -> str:
    """The one line a bf16 CPU run logs: what stock does, what turbotrain does, the speeds behind it."""
    if measured is None:
        return (
            f"turbotrain: bf16 matmuls {'emulated in fp32 GEMMs' if on else 'left to stock autocast'} as set "
            f"(bf16_emulation={setting!r}) on this CPU ({cpu_model()})."
        )
    where = f"this CPU ({cpu_model()}) has no bf16 matmul units (no amx_bf16/avx512_bf16){cap_note()}"
    speeds = (
        f"{measured.shape[0]}x{measured.shape[1]}x{measured.shape[2]} matmul: fp32 "
        f"{measured.gflops(measured.fp32):.0f} GFLOP/s, stock bf16 autocast {measured.gflops(measured.autocast_bf16):.0f}, "
        f"emulated {measured.gflops(measured.emulated):.0f}"
    )
    if not on:
        return f"turbotrain: {where}, but emulation measured no faster here ({speeds}); stock bf16 autocast kept."
    return (
        f"turbotrain: {where}: stock bf16 autocast would run its matmuls in torch's slow bf16 fallback; turbotrain "
        f"runs them as fp32 GEMMs on bf16-rounded inputs, output rounded to bf16 (bf16's numbers) ({speeds}). "
        "bf16_emulation='off' keeps stock."
    )
