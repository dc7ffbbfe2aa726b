"""Whether a pass that adds kernels pays on this device: a short timing of one module, its own forward against
the pass's, forward and backward, on the device the module is on; cached per machine like the `auto` backend's
choice and packed attention's kernel (kernel_choice.py).

Where: on an accelerator (`timed_on`: any device but the CPU, whose figures are the benchmarks' and where these
passes measured wins on every shape tried). Fused LoRA and the lean gated MLP ask it for each distinct module
shape; a shape whose pass forward is slower than the module's own stays stock there (PEFT's LoRA forward, the
model's MLP), said in one warning with both times, and the rest of the pass installs as usual.

How: an input of `TOKENS` rows of the module's input width in its weight dtype, requiring grad as a hidden
state in training does; under the run's autocast (self_check.current_precision); one warm-up of each, then
`REPEATS` forward + backward runs of each, the two ways alternating (neither always first while clocks settle),
medians kept (gradients of the input and of every trainable parameter, none accumulated into `.grad`),
synchronised on CUDA. The pass installs where its median is at most the module's own; a shape whose timing
raises (an out-of-memory on a full device) stays stock, said in the same warning. The key: the device's
name, torch's, PEFT's and TRL's versions, the pass, the module's shape (with what changes its cost: LoRA or not,
trainable or frozen), dtype and autocast. The timing draws its inputs from a generator of its own and runs
inside `utils.random_state.random_state_kept` (dropout in a timed module), so a run's random numbers (dropout masks, GRPO's
sampling) are the same whether the timing ran or came from the cache.
Exactness is not decided here: each pass's own install check runs as before.
"""

from __future__ import annotations

import importlib.metadata
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from turbotrain.passes.self_check import current_precision
from turbotrain.utils.cache import device_name, digest, read_entry, write_entry
from turbotrain.utils.random_state import random_state_kept
from turbotrain.utils.warnings import warn_once

CACHE_FILE = "pass_timing.json"
TOKENS = 4096
REPEATS = 5


@dataclass(frozen=True)
class Timing:
    """Median milliseconds of one module's forward + backward, its own and the pass's."""

    stock_ms: float
    pass_ms: float


def timed_on(device: torch.device) -> bool:
    return device.type not in ("cpu", "meta")


def keep_where_faster(
    pass_name: str,
    modules: list[nn.Module],
    shape_of: Callable[[nn.Module], tuple],
    width_of: Callable[[nn.Module], int],
    stock: Callable,
    rewritten: Callable,
) -> list[nn.Module]:
    """The modules of `modules` whose shape's pass forward (`rewritten(module, x)`) measured at most as slow
    as their own (`stock(module, x)`) on their device; all of them where the device is not timed."""
    verdicts: dict[tuple, Timing | str | None] = {}
    for module in modules:
        shape = shape_of(module)
        if shape not in verdicts:
            verdicts[shape] = _timing_or_why(pass_name, module, shape, width_of(module), stock, rewritten)
    slower = {
        shape: timing
        for shape, timing in verdicts.items()
        if isinstance(timing, str) or (timing is not None and timing.pass_ms > timing.stock_ms)
    }
    if slower:
        listed = "; ".join(f"{_shape_text(shape)}: {_verdict_text(timing)}" for shape, timing in slower.items())
        kept = sum(shape_of(module) not in slower for module in modules)
        warn_once(f"turbotrain: {pass_name} leaves the module shapes it measured slower on this device stock "
                  f"({listed}); {kept} of {len(modules)} modules keep it")  # fmt: skip
    return [module for module in modules if shape_of(module) not in slower]


def _verdict_text(timing: Timing | str) -> str:
    return timing if isinstance(timing, str) else f"{timing.pass_ms:.3f} ms against {timing.stock_ms:.3f} ms"


def _timing_or_why(pass_name, module, shape, width, stock, rewritten) -> Timing | str | None:
    """The shape's `Timing`, or why it could not be timed (an out-of-memory on a full device: the shape stays
    stock, never slower; the run goes on)."""
    try:
        return _timing(pass_name, module, shape, width, stock, rewritten)
    except Exception as error:  # noqa: BLE001  (said in the warning; that shape keeps the module's own forward)
        why = f"its timing raised {type(error).__name__}: {str(error)[:160]}"
    weight = next(module.parameters(), None)
    if weight is not None and weight.device.type == "cuda":  # out of the except: its traceback holds nothing now
        torch.cuda.empty_cache()
    return why


def _shape_text(shape: tuple) -> str:
    return " ".join(str(part) for part in shape)


def _timing(pass_name, module, shape, width, stock, rewritten) -> Timing | None:
    weight = next(module.parameters(), None)
    if weight is None or not timed_on(weight.device):
        return None
    x = torch.randn(TOKENS, width, device=weight.device, dtype=weight.dtype, generator=generator(weight.device))
    x.requires_grad_()
    trainable = [p for p in module.parameters() if p.requires_grad]

    def step_of(forward):
        def step():
            out = forward(module, x)
            torch.autograd.grad(out, [x, *trainable], torch.ones_like(out), allow_unused=True)

        return step

    what = (*shape, str(weight.dtype), repr(current_precision(module)))
    with current_precision(module).autocast():
        return measured(pass_name, weight.device, what, step_of(stock), step_of(rewritten))


def measured(pass_name: str, device: torch.device, what: tuple, stock_step: Callable, pass_step: Callable):
    """The `Timing` of two zero-argument steps (each a forward and backward: the stock way, the pass's) on
    `device`, cached under the pass's name and `what` (its shape, dtype, precision); None where the device is
    not timed. Runs with gradients on, under whatever autocast the caller set."""
    if not timed_on(device):
        return None
    versions = _versions()
    key = digest(device_name(device), versions, pass_name, repr(what))
    cached = read_entry(CACHE_FILE, key)
    if isinstance(cached, dict) and {"stock_ms", "pass_ms"} <= set(cached):
        return Timing(float(cached["stock_ms"]), float(cached["pass_ms"]))
    with torch.enable_grad(), random_state_kept(device):
        timing = Timing(*_medians_ms(stock_step, pass_step, device))
    entry = {"pass": pass_name, "shape": [str(part) for part in what], "device": device_name(device)}
    write_entry(
        CACHE_FILE, key, {**entry, "versions": versions, "stock_ms": timing.stock_ms, "pass_ms": timing.pass_ms}
    )
    return timing


def generator(device: torch.device) -> torch.Generator:
    """A seeded generator of the timing's own for its random inputs (the run's generators stay untouched)."""
    return torch.Generator(device=device).manual_seed(0)


def _versions() -> str:
    names = [f"torch {torch.__version__}"]
    for package in ("peft", "trl"):
        version = _version_of(package)
        if version is not None:
            names.append(f"{package} {version}")
    return ", ".join(names)


def _version_of(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _medians_ms(stock_step: Callable[[], None], pass_step: Callable[[], None], device: torch.device):
    """(stock's, the pass's) median milliseconds, after a warm-up of each, the two alternating."""
    stock_step()
    pass_step()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(REPEATS):
        for step, kept in ((stock_step, times[0]), (pass_step, times[1])):
            _synchronize(device)
            start = time.perf_counter()
            step()
            _synchronize(device)
            kept.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[0]), statistics.median(times[1])


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
