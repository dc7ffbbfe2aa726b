"""Which head answers TRL's fused-head calls on an accelerator: TRL's own kernel (Triton on CUDA) or the
chunked head's, whichever measured faster; exact either way (both an fp32 log-softmax of the same logits, each
kept row's log-probability, entropy, arg-max match and mean logit).

Label sparsity and padding-free answer a TRL trainer's `fused_lm_head=True` calls (fused_head_calls.py): they
choose and pack the scored rows, and the chunked head projects them. Since TRL 1.15 a GPU run of TRL's trainers
scores its kept rows with a Triton kernel, a strong peer; so on an accelerator the projection of those rows is
timed once per kind of call, both ways, and the faster one projects from then on:

* kind: the device, torch's, PEFT's and TRL's versions, vocabulary, hidden size, dtype, autocast, weighting
  ("equal": SFT, dW summed in the forward; "per_row": DPO, KTO, GRPO, RLOO), temperature, statistics wanted,
  soft-cap, bias, whether the head trains (a full fine-tune) or not (LoRA), whether the call wants gradients
  (a reference model's does not), and the kept rows rounded up to a power of two;
* how: random rows [K, H] in the hidden states' dtype, the model's own head weight, random targets (from the
  timing's own generator, inside `fork_rng`: the run's random numbers stay as they were); forward and backward
  of sum(log-probabilities), forward only for a call without gradients (passes/device_timing.py `measured`: one
  warm-up, medians of 5 alternating, synchronised; cached in `pass_timing.json`). TRL's kernel takes the call
  where its median is lower. Where TRL's kernel raises there (a Triton build for another GPU), the chunked head
  answers, said once.

The CPU is not timed: there the chunked head is the one measured (TRL's kernel runs torch ops without Triton).
The rows, packing and the answer's shape stay turbotrain's either way; only the [K, H] x [H, V] projection and
its log-softmax change hands.
"""

from __future__ import annotations

import functools

import torch

from turbotrain.boundaries import trl_boundary
from turbotrain.passes import device_timing
from turbotrain.utils.warnings import warn_once

TRL = "trl"
CHUNKED = "chunked"
CHUNKED_REVISION = "fused epilogue"  # in the cache key: timings of an older chunked op are not reused
_chosen: dict[tuple, str] = {}


def trl_outputs(want_stats: bool) -> tuple[str, ...]:
    return ("log_probs", "entropy", "is_top1", "mean_logits") if want_stats else ("log_probs",)


def trl_projection(hidden, weight, bias, targets, softcap, temperature: float, want_stats: bool):
    """(nll, entropy, is_top1, mean_logit) of the scored rows through TRL's kernel, as the chunked head answers
    them (statistics None without `want_stats`; they carry no gradient)."""
    log_probs, entropy, _, mean_logits, is_top1 = trl_boundary.trl_head_log_probs(
        hidden, weight, bias, targets, temperature, softcap, trl_outputs(want_stats)
    )
    if not want_stats:
        return -log_probs, None, None, None
    return -log_probs, entropy.detach(), is_top1.detach(), mean_logits.detach()


def head_for(hidden, linear, softcap, temperature: float, want_stats: bool, weighting: str, chunked) -> str:
    """TRL or CHUNKED for the scored rows `hidden` [K, H] of `linear` (the head): CHUNKED off an accelerator or
    without TRL's kernel, else the faster as measured once per kind of call; `chunked(rows, targets)` is the
    chunked head's own projection for this call (its nll first)."""
    if not device_timing.timed_on(hidden.device) or not _has_trl_kernel():
        return CHUNKED
    rows = 1 << max(hidden.shape[0] - 1, 0).bit_length()
    on = torch.is_autocast_enabled(hidden.device.type)
    autocast = torch.get_autocast_dtype(hidden.device.type) if on else None
    shape = tuple(linear.weight.shape)
    trains = "head trained" if linear.weight.requires_grad else "head frozen"
    backward = "backward" if torch.is_grad_enabled() else "forward only"
    what = ("fused head", CHUNKED_REVISION, shape, str(hidden.dtype), str(autocast), weighting, temperature,
            want_stats, softcap, linear.bias is not None, trains, backward, rows)  # fmt: skip
    if what not in _chosen:
        _chosen[what] = _measure(what, hidden, linear, softcap, temperature, want_stats, chunked)
    return _chosen[what]


@functools.cache
def _has_trl_kernel() -> bool:
    try:
        import trl.kernels  # noqa: F401
    except ImportError:
        return False
    return True


def _measure(what, hidden, linear, softcap, temperature, want_stats, chunked) -> str:
    rows, backward = what[-1], what[-2] == "backward"
    generator = device_timing.generator(hidden.device)
    x = torch.randn(rows, hidden.shape[1], device=hidden.device, dtype=hidden.dtype, generator=generator)
    targets = torch.randint(0, linear.weight.shape[0], (rows,), device=hidden.device, generator=generator)
    x.requires_grad_(backward)
    trainable = [x, *(p for p in (linear.weight, linear.bias) if p is not None and p.requires_grad)]

    def trl(rows, targets):
        return trl_projection(rows, linear.weight, linear.bias, targets, softcap, temperature, want_stats)

    def step_of(project):
        def step():
            if not backward:
                with torch.no_grad():
                    project(x, targets)
                return
            torch.autograd.grad(project(x, targets)[0].sum(), trainable, allow_unused=True)

        return step

    try:
        timing = device_timing.measured("fused head", hidden.device, what, step_of(chunked), step_of(trl))
    except Exception as error:  # TRL's Triton kernel on a GPU it was not built for, an older torch's check
        warn_once(f"turbotrain: timing TRL's fused LM head kernel against the chunked head failed "
                  f"({type(error).__name__}: {error}); the chunked head answers these calls")  # fmt: skip
        return CHUNKED
    return TRL if timing is not None and timing.pass_ms < timing.stock_ms else CHUNKED


def chosen_heads() -> dict[tuple, str]:
    """What each kind of fused call chose in this process (the run's summary, tests)."""
    return dict(_chosen)
