"""Which head answers TRL's fused-head calls on an accelerator: TRL's own kernel (Triton on CUDA) or the
chunked head's, whichever measured faster; exact either way (both an fp32 log-softmax of the same logits, each
kept row's log-probability, entropy, arg-max match and mean logit).

Label sparsity and padding-free answer a TRL trainer's `fused_lm_head=True` calls (fused_head_calls.py): they
choose and pack the scored rows, and the chunked head projects them. Since TRL 1.15 a GPU run of TRL's trainers
scores its kept rows with a Triton kernel, a strong peer; so on an accelerator the projection of those rows is
timed once per kind of call, both ways, and the faster one projects from then on:

* kind: the device, torch's and PEFT's versions, vocabulary, hidden size, dtype, autocast, weighting ("equal":
  SFT, dW summed in the forward; "per_row": DPO, KTO, GRPO, RLOO), temperature, statistics wanted, and the kept
  rows rounded up to a power of two;
* how: random rows [K, H] in the hidden states' dtype, the model's own head weight, random targets; forward and
  backward of sum(log-probabilities) (passes/device_timing.py `measured`: one warm-up, median of 5,
  synchronised; cached in `pass_timing.json`). TRL's kernel takes the call where its median is lower.

The CPU is not timed: there the chunked head is the one measured (TRL's kernel runs torch ops without Triton).
The rows, packing and the answer's shape stay turbotrain's either way; only the [K, H] x [H, V] projection and
its log-softmax change hands.
"""

from __future__ import annotations

import functools

import torch

from turbotrain.boundaries import trl_boundary
from turbotrain.passes import device_timing

TRL = "trl"
CHUNKED = "chunked"
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
    what = ("fused head", shape, str(hidden.dtype), str(autocast), weighting, temperature, want_stats, rows)
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
    rows = what[-1]
    x = torch.randn(rows, hidden.shape[1], device=hidden.device, dtype=hidden.dtype).requires_grad_()
    targets = torch.randint(0, linear.weight.shape[0], (rows,), device=hidden.device)
    trainable = [x, *(p for p in (linear.weight, linear.bias) if p is not None and p.requires_grad)]

    def trl(rows, targets):
        return trl_projection(rows, linear.weight, linear.bias, targets, softcap, temperature, want_stats)

    def step_of(project):
        def step():
            torch.autograd.grad(project(x, targets)[0].sum(), trainable, allow_unused=True)

        return step

    timing = device_timing.measured("fused head", hidden.device, what, step_of(chunked), step_of(trl))
    return TRL if timing is not None and timing.pass_ms < timing.stock_ms else CHUNKED


def chosen_heads() -> dict[tuple, str]:
    """What each kind of fused call chose in this process (the run's summary, tests)."""
    return dict(_chosen)
