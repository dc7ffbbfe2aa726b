"""The per-row op's fused chunks (chunked_ce/logprobs.py with chunked_ce/fused_epilogue.py's `log_prob_stats` and
`weighted_gradient`), run on the CPU: the functions against the eager chunks, once through the CPU's Inductor, and
the op with them against the op without, for a trainable head (logits recomputed in the backward), a frozen one
(dh in the forward) and no gradient, each under unequal per-row weights."""

from __future__ import annotations

import pytest
import torch

from tests.passes.test_chunked_logprobs import _inputs
from turbotrain.passes.chunked_ce import fused_epilogue, logprobs
from turbotrain.passes.chunked_ce.logprobs import linear_log_probs

BF16, FP32 = torch.bfloat16, torch.float32


def chunk_args(dtype=FP32, bias=False, rows=29, vocab=1003):
    (h, weight, b), target, row_weight = _inputs(rows, vocab, 16, bias)
    return h.to(dtype), (weight * 40).to(dtype), b, target, row_weight


def assert_same(got, expected, dtype=FP32):
    for a, b in zip(got, expected):
        assert (a is None) == (b is None)
        if a is None:
            continue
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.dtype == torch.bool:
            assert torch.equal(a, b)
        else:
            tolerance = 2**-8 if a.dtype == BF16 else 1e-4
            torch.testing.assert_close(a.float(), b.float(), rtol=1e-5, atol=tolerance * b.float().abs().max().item())


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("softcap,inv_t", [(None, 1.0), (3.0, 1 / 0.7), (None, 1 / 1.6)])
@pytest.mark.parametrize("want_stats,unit", [(True, False), (False, True), (True, True)])
def test_the_forward_chunk_fused_is_the_eager_one(fused_on_cpu, dtype, softcap, inv_t, want_stats, unit):
    h, weight, b, target, _ = chunk_args(dtype, bias=True)
    kw = dict(weight=weight, bias=b, softcap=softcap, inv_t=inv_t, want_stats=want_stats, unit=unit)
    (outputs, dz), (eager_outputs, eager_dz) = (
        logprobs._forward_chunk(h, target, fused=f, **kw) for f in (True, False)
    )
    assert_same(outputs, eager_outputs)
    assert_same([dz], [eager_dz], dtype)


@pytest.mark.parametrize("softcap,inv_t", [(None, 1.0), (3.0, 1 / 0.7)])
def test_the_backward_chunk_fused_is_the_eager_one(fused_on_cpu, softcap, inv_t):
    h, weight, _, target, row_weight = chunk_args()
    lse = torch.logsumexp(40 * torch.randn(len(target), 7), dim=1)
    kw = dict(weight=weight, bias=None, softcap=softcap, inv_t=inv_t)
    fused, eager = (logprobs._backward_chunk(h, target, lse, row_weight, fused=f, **kw) for f in (True, False))
    assert_same([fused], [eager])


def test_inductors_kernels_are_the_eager_functions():
    h, weight, b, target, row_weight = chunk_args(BF16, bias=True, rows=41)
    logits = h @ weight.T
    for rows in (41, 13):  # one graph for any number of rows
        head = (b, target[:rows], 3.0, 1.25)
        stats = fused_epilogue.compiled(fused_epilogue.log_prob_stats)(logits[:rows].clone(), *head, True)
        assert_same(stats, fused_epilogue.log_prob_stats(logits[:rows].clone(), *head, True))
        lse, weights = stats[0], row_weight[:rows]
        gradient = fused_epilogue.compiled(fused_epilogue.weighted_gradient)
        got = gradient(logits[:rows].clone(), b, lse, target[:rows], weights, 3.0, 1.25)
        expected = fused_epilogue.weighted_gradient(logits[:rows].clone(), b, lse, target[:rows], weights, 3.0, 1.25)
        assert_same([got], [expected], BF16)


@pytest.mark.parametrize(
    "trainable,bias,softcap,temperature",
    [
        ((True, False), False, None, 1.0),  # a full fine-tune: the backward's chunks fused too
        ((True, False), False, 3.0, 0.7),  # soft-capping, GRPO's temperature
        ((False, False), False, None, 1.0),  # a frozen head (LoRA): the unit gradient fused in the forward
        ((True, True), True, None, 1.0),  # a trained bias: its gradient's fp32 sum keeps the eager backward
    ],
)
def test_the_op_with_fused_chunks_is_the_op_without(fused_on_cpu, monkeypatch, trainable, bias, softcap, temperature):
    asked = fused_on_cpu(stock_ms=2.0, fused_ms=1.0)
    (h, weight, b), targets, row_weights = _inputs(45, 1500, 16, bias)
    tensors = (h, weight * 40, b)
    fused = _run(tensors, targets, row_weights, trainable, softcap, temperature)
    assert len(asked) == (2 if trainable[0] and not bias else 1)  # the forward's chunk; the backward's
    with monkeypatch.context() as eager_only:
        eager_only.setattr(fused_epilogue, "applies", lambda device: False)
        eager = _run(tensors, targets, row_weights, trainable, softcap, temperature)
    for a, b in zip(fused, eager):
        assert_same([a], [b])


def _run(tensors, targets, row_weights, trainable, softcap, temperature):
    leaves = [None if t is None else t.clone().requires_grad_(grad) for t, grad in zip(tensors, (True, *trainable))]
    nll, entropy, is_top1, mean = linear_log_probs(
        *leaves, targets, softcap=softcap, chunk_rows=16, temperature=temperature
    )
    (nll * row_weights).sum().backward()
    return nll.detach(), entropy, is_top1, mean, *(None if leaf is None else leaf.grad for leaf in leaves)


def test_no_gradient_wanted_fuses_the_forward_only(fused_on_cpu):
    asked = fused_on_cpu(stock_ms=2.0, fused_ms=1.0)
    (h, weight, _), targets, _ = _inputs(20, 800, 8, False)
    with torch.no_grad():
        fused = linear_log_probs(h, weight, None, targets, chunk_rows=8, want_stats=False)
    assert len(asked) == 1 and fused[1] is None
    expected = fused_epilogue.log_prob_stats(h @ weight.T, None, targets, None, 1.0, False)[1]
    torch.testing.assert_close(fused[0], expected)
