"""Per-token log-probabilities of a linear head, chunked, for losses that weight every row differently.

The building block of preference and RL post-training (TRL's DPO, KTO: passes/fused_head_calls.py): those
trainers read the log-probability of each chosen token and weight it by a factor of their own (per sequence
for DPO's sigmoid loss, per token with `ld_alpha`), so the weight gradient cannot be summed in the forward
with one shared factor, as the SFT op does (chunked_ce/__init__.py: `LinearCrossEntropy`).

Op `LinearLogProbs` (autograd.Function): hidden [K, H] (only the scored rows: completion tokens; prompts and
padding never reach the head), weight [V, H], bias [V] or None, targets [K] -> per-row NLL [K] (-log p of the
target), and without gradient per-row entropy [K], whether the target is the arg-max [K], mean logit [K]
(with `want_stats`; a reference model's call skips them: TRL reads only its log-probs).
Rows go through in chunks of `chunk_rows`: logits z = h·Wᵀ + b [C, V] in fp32 (optionally soft-capped,
z = c·tanh(z / c), then scaled by 1 / temperature as TRL's kernel does for GRPO: z · (1 / T), after the cap),
their log-sum-exp [C] kept for the backward. Nothing of size [K, V] is ever held. Every output (log-prob,
entropy, arg-max, mean logit) is of the scaled logits, as TRL's.

Backward, for any per-row weight g [K] (the incoming gradient of the NLL):
* a trainable head (weight or bias needs a gradient): each chunk's logits are recomputed (one more matmul),
  dz = g·(softmax(z) - onehot(target)) (times 1 / T, times 1 - tanh² under soft-capping), dh = dz·W, dW += dzᵀ·h, db += Σ dz.
  Four matmuls on the K scored rows, against three on every position for a dense head;
* a frozen head (LoRA) with hidden states needing a gradient: dh of unit weight is computed in the forward
  (dz·W, no recompute) and the backward scales row k by g[k]: exact for any weighting;
* no gradient wanted (a reference model under `no_grad`): the forward's one matmul per chunk, nothing saved.

Exact: per row the same fp32 log-sum-exp as a dense `log_softmax(h·Wᵀ + b)` gathered at the target (TRL's
own computation); dW summed chunk by chunk in fp32 (float order only, ≤1e-5 relative:
tests/passes/test_chunked_logprobs.py). On CPU the matmuls run in the weight's dtype (fp32 for fp32 weights).
On CUDA under autocast (or with half weights) the recomputed dW's matmul runs in the half dtype, summed in fp32
(`cuda.add_weight_grad`: an in-place `addmm_` is never cast by autocast, so it was an fp32 GEMM), and chunks are
sized from H (`cuda.cuda_chunk_rows`) as the SFT op's. The entropy holds one [C, V] tensor besides the logits
(the product taken in place). There, where the device measured it faster, each chunk's elementwise work runs as
one Inductor-compiled function of the matmul's half output (chunked_ce/fused_epilogue.py: `log_prob_stats` in
the forward, `weighted_gradient` in the backward and for a frozen head's unit gradient).
"""

from __future__ import annotations

import functools

import torch

from turbotrain.passes.chunked_ce import cuda, fused_epilogue

# fp32 logits of one chunk (as chunked_ce.CHUNK_BYTES: ~220 rows at a 151,936 vocabulary)
CHUNK_BYTES = 128 * 2**20


def chunk_rows_for(vocab: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    return max(1, chunk_bytes // (4 * vocab))


def head_logits(h, weight, bias, softcap, inv_t=1.0):
    """(z [C, V] fp32, tanh [C, V] or None): the head's logits for one chunk, soft-capped if asked, then times
    `inv_t` (1 / temperature) as TRL's kernel scales them."""
    z = (h @ weight.T).float()  # [C, H] x [H, V] -> [C, V]
    if bias is not None:
        z += bias.float()
    tanh = None
    if softcap:
        tanh = torch.tanh(z / softcap)
        z = tanh * softcap
    if inv_t != 1.0:
        z.mul_(inv_t)
    return z, tanh


def _unit_gradient(z, lse, target, tanh, inv_t=1.0):
    """dz [C, V] = softmax(z) - onehot(target) (times 1 / T, times 1 - tanh²), in place of z."""
    rows = torch.arange(z.shape[0], device=z.device)
    z.sub_(lse[:, None]).exp_()
    z[rows, target] -= 1
    if inv_t != 1.0:
        z.mul_(inv_t)
    if tanh is not None:
        z.mul_(1 - tanh * tanh)
    return z


class LinearLogProbs(torch.autograd.Function):
    """Per-row NLL of a linear head for unequal row weights (module docstring)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, softcap, chunk_rows, want_stats=True, inv_t=1.0):
        rows = hidden.shape[0]
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[2]
        recompute = need_w or need_b
        nll, lse = (hidden.new_empty(rows, dtype=torch.float32) for _ in range(2))
        stat_rows = rows if want_stats else 0  # without statistics: empty [0] tensors
        entropy, mean_logit = (hidden.new_empty(stat_rows, dtype=torch.float32) for _ in range(2))
        is_top1 = hidden.new_empty(stat_rows, dtype=torch.bool)
        dh = torch.empty_like(hidden) if need_h and not recompute else None
        chunk = functools.partial(_forward_chunk, weight=weight, bias=bias, softcap=softcap, inv_t=inv_t,
                                  want_stats=want_stats, unit=dh is not None)  # fmt: skip
        fused = _fused(chunk, "log-probabilities", hidden, weight, bias, chunk_rows, softcap, inv_t, want_stats, dh)
        for start in range(0, rows, chunk_rows):
            part = slice(start, min(start + chunk_rows, rows))
            outputs, unit = chunk(hidden[part], targets[part], fused=fused)
            lse[part], nll[part] = outputs[:2]
            if want_stats:
                entropy[part], is_top1[part], mean_logit[part] = outputs[2:]
            if dh is not None:  # a frozen head: dh of unit weight now, scaled per row in the backward
                dh[part] = unit @ weight  # [C, V] x [V, H]
        ctx.softcap, ctx.chunk_rows, ctx.recompute, ctx.inv_t = softcap, chunk_rows, recompute, inv_t
        ctx.autocast = cuda.autocast_dtype_of(hidden.device)  # the recompute runs under the forward's autocast
        ctx.has_bias = bias is not None
        if recompute:
            ctx.save_for_backward(hidden, weight, bias, targets, lse)
        else:
            ctx.save_for_backward(dh)
        ctx.mark_non_differentiable(entropy, is_top1, mean_logit)
        return nll, entropy, is_top1, mean_logit

    @staticmethod
    def backward(ctx, grad_nll, *unused):
        if not ctx.recompute:
            (dh,) = ctx.saved_tensors
            grad_h = None if dh is None else dh * grad_nll[:, None].to(dh.dtype)
            return grad_h, None, None, None, None, None, None, None
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        gradients = _recomputed_gradients(ctx, hidden, weight, bias, targets, lse, grad_nll)
        return (*gradients, None, None, None, None, None)


def _forward_chunk(h, target, *, weight, bias, softcap, inv_t, want_stats, unit, fused=False):
    """((lse, nll[, entropy, is_top1, mean logit]) each [C], the unit gradient dz [C, V] ready for dz·W or None)
    of the rows `h` [C, H]: eager torch ops, or with `fused` the two functions of chunked_ce/fused_epilogue.py."""
    if fused and h.shape[0] >= fused_epilogue.MIN_ROWS:
        logits = h @ weight.T  # [C, H] x [H, V] -> [C, V], under the run's autocast
        lse, *rest = fused_epilogue.compiled(fused_epilogue.log_prob_stats)(logits, bias, target, softcap, inv_t,
                                                                            want_stats)  # fmt: skip
        outputs = (lse, *rest) if want_stats else (lse, rest[0])
        if not unit:
            return outputs, None
        gradient = fused_epilogue.compiled(fused_epilogue.weighted_gradient)
        return outputs, gradient(logits, bias, lse, target, None, softcap, inv_t)  # in the logits' (mm) dtype
    z, tanh = head_logits(h, weight, bias, softcap, inv_t)
    lse = torch.logsumexp(z, dim=1)
    outputs = (lse, lse - z.gather(1, target[:, None]).squeeze(1))
    if want_stats:
        entropy = lse - torch.softmax(z, dim=1).mul_(z).sum(dim=1)  # one [C, V] besides z
        outputs += (entropy, z.argmax(dim=1) == target, z.mean(dim=1))
    if not unit:
        return outputs, None
    return outputs, _unit_gradient(z, lse, target, tanh, inv_t).to(_matmul_dtype(h.device, weight.dtype))


def _backward_chunk(h, target, lse, row_weight, *, weight, bias, softcap, inv_t, fused=False):
    """dz [C, V] = row_weight · d nll / d z of the rows `h` [C, H], the logits recomputed: eager, or `fused`
    (fused_epilogue.weighted_gradient) in the logits' dtype, the one dz·W and dzᵀ·h multiply in."""
    if fused and h.shape[0] >= fused_epilogue.MIN_ROWS:
        gradient = fused_epilogue.compiled(fused_epilogue.weighted_gradient)  # a sum's gradient has stride 0:
        return gradient(h @ weight.T, bias, lse, target, row_weight.contiguous(), softcap, inv_t)  # one graph
    z, tanh = head_logits(h, weight, bias, softcap, inv_t)
    return _unit_gradient(z, lse, target, tanh, inv_t).mul_(row_weight[:, None].float())


def _matmul_dtype(device: torch.device, weight_dtype: torch.dtype) -> torch.dtype:
    """The dtype the head's matmuls run in here: the run's half dtype on CUDA (cuda.compute_dtype_for), else the
    weight's."""
    return cuda.compute_dtype_for(device, weight_dtype, cuda.autocast_dtype_of(device)) or weight_dtype


def _fused(chunk, what, hidden, weight, bias, chunk_rows, softcap, inv_t, want_stats, *wanted, backward=False) -> bool:
    """Whether `chunk` runs fused on this device: where it applies and one chunk measured at most as slow
    (`backward`: `chunk` is `_backward_chunk`, which also takes the rows' lse and weights)."""
    if not fused_epilogue.applies(hidden.device):
        return False
    autocast = cuda.autocast_dtype_of(hidden.device)
    kind = (*weight.shape, str(weight.dtype), str(autocast), chunk_rows, softcap or 0.0, inv_t, bias is not None,
            want_stats, *(x is not None for x in wanted))  # fmt: skip

    def steps(h, target):
        lse = torch.zeros(len(target), device=h.device)  # the backward's: any values time alike
        extra = (lse, torch.ones_like(lse)) if backward else ()
        return lambda: chunk(h, target, *extra), lambda: chunk(h, target, *extra, fused=True)

    return fused_epilogue.chosen(what, hidden.device, weight, chunk_rows, kind, steps)


def _recomputed_gradients(ctx, hidden, weight, bias, targets, lse, grad_nll):
    """(dh, dW, db) for per-row weights `grad_nll` [K], each chunk's logits computed again, as in the forward."""
    device_type = hidden.device.type
    with torch.autocast(device_type, dtype=ctx.autocast or torch.float32, enabled=ctx.autocast is not None):
        return _gradients(ctx, hidden, weight, bias, targets, lse, grad_nll)


def _gradients(ctx, hidden, weight, bias, targets, lse, grad_nll):
    need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    need_b = ctx.has_bias and ctx.needs_input_grad[2]
    rows = hidden.shape[0]
    half = cuda.compute_dtype_for(hidden.device, weight.dtype, ctx.autocast)  # None: fp32 (CPU, an fp32 run)
    dh = torch.empty_like(hidden) if need_h else None
    dw = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
    db = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
    chunk = functools.partial(_backward_chunk, weight=weight, bias=bias, softcap=ctx.softcap, inv_t=ctx.inv_t)
    mm_dtype = half or weight.dtype
    fused = not need_b and _fused(chunk, "log-probability gradient", hidden, weight, bias, ctx.chunk_rows,
                                  ctx.softcap, ctx.inv_t, False, dh, dw, backward=True)  # fmt: skip
    for start in range(0, rows, ctx.chunk_rows):
        part = slice(start, min(start + ctx.chunk_rows, rows))
        h = hidden[part]
        dz = chunk(h, targets[part], lse[part], grad_nll[part], fused=fused)  # fp32 eager, `mm_dtype` fused
        if dh is not None:
            dh[part] = dz.to(mm_dtype) @ weight  # [C, V] x [V, H] -> [C, H]
        if dw is not None and half is not None:  # in place, so autocast would not cast it: the half dtype here
            cuda.add_weight_grad(dw, dz.T.to(half), h.to(half), first=start == 0)
        elif dw is not None:
            dw.addmm_(dz.T, h.float())  # [V, C] x [C, H]
        if db is not None:
            db += dz.sum(dim=0)
    return (
        dh,
        None if dw is None else dw.to(weight.dtype),
        None if db is None else db.to(bias.dtype),
    )


def linear_log_probs(
    hidden, weight, bias, targets, *, softcap=None, chunk_rows=None, want_stats=True, temperature: float = 1.0
):
    """(nll, entropy, is_top1, mean_logit), each [K], of the head on the scored rows `hidden` [K, H], its logits
    divided by `temperature` (times 1 / T, as TRL's kernel: GRPO's sampling temperature).

    The NLL carries gradients for any per-row weighting; the statistics carry none. Without `want_stats`
    the statistics are None and not computed (a reference model's call: TRL reads its log-probs only)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if chunk_rows is None:  # CUDA: rows from H, as the SFT op's (chunked_ce/cuda.py); the CPU: 128 MB of logits
        on_cuda = hidden.device.type == "cuda"
        chunk_rows = cuda.cuda_chunk_rows(weight.shape[1]) if on_cuda else chunk_rows_for(weight.shape[0])
    apply = LinearLogProbs.apply
    nll, *stats = apply(hidden, weight, bias, targets, softcap or None, chunk_rows, want_stats, 1 / temperature)
    return (nll, *stats) if want_stats else (nll, None, None, None)
