"""The per-row-weighted chunked log-prob op gives a dense head's log-probabilities, statistics and every
gradient for any per-row weighting (fp32 1e-5 relative; bf16 loosely), trainable, frozen or without grad."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.tiny_models import LLM_VOCAB, VOCAB
from turbotrain.passes.chunked_ce.logprobs import linear_log_probs


def _inputs(rows, vocab, hidden, bias, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, hidden, generator=generator)
    weight = torch.randn(vocab, hidden, generator=generator) * 0.05
    b = torch.randn(vocab, generator=generator) if bias else None
    targets = torch.randint(0, vocab, (rows,), generator=generator)
    row_weights = torch.randn(rows, generator=generator)  # unequal, signed: DPO's chosen/rejected factors
    return [t.to(dtype) if t is not None else None for t in (h, weight, b)], targets, row_weights


def _dense(h, weight, bias, targets, softcap, temperature=1.0):
    z = F.linear(h, weight, bias).float()
    z = (softcap * torch.tanh(z / softcap) if softcap else z) / temperature  # TRL's order: cap, then temperature
    logp = z.log_softmax(dim=1)
    nll = -logp.gather(1, targets[:, None]).squeeze(1)
    entropy = -(logp.exp() * logp).sum(dim=1)
    return nll, entropy.detach(), (z.argmax(dim=1) == targets), z.mean(dim=1).detach()


def _run(chunked, tensors, targets, row_weights, trainable, softcap, chunk_rows, temperature=1.0):
    leaves = [None if t is None else t.clone().requires_grad_(grad) for t, grad in zip(tensors, (True, *trainable))]
    if chunked:
        outputs = linear_log_probs(*leaves, targets, softcap=softcap, chunk_rows=chunk_rows, temperature=temperature)
    else:
        outputs = _dense(*leaves, targets, softcap, temperature)
    loss = (outputs[0] * row_weights).sum()
    loss.backward()
    grads = [None if leaf is None or leaf.grad is None else leaf.grad for leaf in leaves]
    return loss.detach(), [o.detach() for o in outputs], grads


def assert_close_to_scale(actual, expected, rtol):
    if expected is None:
        assert actual is None
        return
    torch.testing.assert_close(actual.float(), expected.float(), rtol=rtol, atol=rtol * expected.abs().max().item())


@pytest.mark.parametrize(
    "rows,vocab,hidden,bias,softcap,chunk_rows,trainable,temperature",
    [
        (37, LLM_VOCAB, 16, False, None, None, (True, False), 1.0),  # Qwen2's vocabulary, odd rows, default chunks
        (37, VOCAB, 8, True, 3.0, 5, (True, True), 1.0),  # soft-capping, chunks that do not divide the rows, a bias
        (23, 1000, 24, True, None, 7, (False, False), 1.0),  # a frozen head (LoRA): dh from the forward, scaled
        (1, 1000, 24, False, None, None, (True, False), 1.0),
        (37, VOCAB, 8, True, 3.0, 5, (True, True), 0.7),  # GRPO's temperature, after the soft cap
        (23, 1000, 24, True, None, 7, (False, False), 1.6),  # a temperature with a frozen head
    ],
)
def test_op_matches_dense_log_softmax_for_unequal_row_weights(
    rows, vocab, hidden, bias, softcap, chunk_rows, trainable, temperature
):
    tensors, targets, row_weights = _inputs(rows, vocab, hidden, bias)
    trainable = trainable if bias else trainable[:1] + (False,)
    stock = _run(False, tensors, targets, row_weights, trainable, softcap, chunk_rows, temperature)
    fast = _run(True, tensors, targets, row_weights, trainable, softcap, chunk_rows, temperature)
    torch.testing.assert_close(fast[0], stock[0], rtol=1e-5, atol=1e-6)
    for actual, expected in zip(fast[1], stock[1]):
        if expected.dtype == torch.bool:
            assert torch.equal(actual, expected)
        else:
            assert_close_to_scale(actual, expected, 1e-5)
    for actual, expected in zip(fast[2], stock[2]):
        assert_close_to_scale(actual, expected, 1e-5)


def test_op_without_gradient_saves_nothing_and_matches():
    tensors, targets, _ = _inputs(19, 500, 12, bias=False)
    with torch.no_grad():
        nll, entropy, is_top1, mean_logit = linear_log_probs(tensors[0], tensors[1], None, targets, chunk_rows=4)
        expected = _dense(tensors[0], tensors[1], None, targets, None)
    assert nll.grad_fn is None
    torch.testing.assert_close(nll, expected[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mean_logit, expected[3], rtol=1e-5, atol=1e-6)


def test_op_zero_rows_gives_zero_gradients():
    h = torch.zeros(0, 8, requires_grad=True)
    weight = torch.randn(VOCAB, 8, requires_grad=True)
    nll = linear_log_probs(h, weight, None, torch.zeros(0, dtype=torch.long))[0]
    nll.sum().backward()
    assert torch.count_nonzero(weight.grad) == 0 and h.grad.shape == (0, 8)


def test_op_bf16_weights_close_to_dense_bf16():
    tensors, targets, row_weights = _inputs(29, 2000, 32, bias=False, dtype=torch.bfloat16)
    stock = _run(False, tensors, targets, row_weights, (True, False), None, None)
    fast = _run(True, tensors, targets, row_weights, (True, False), None, 8)
    torch.testing.assert_close(fast[0], stock[0], rtol=2e-2, atol=2e-2)
    for actual, expected in zip(fast[2][:2], stock[2][:2]):
        assert_close_to_scale(actual, expected, 5e-2)


def test_op_under_cpu_bf16_autocast_recomputes_as_the_forward_did():
    tensors, targets, row_weights = _inputs(21, 1500, 16, bias=False)
    results = []
    for chunked in (False, True):
        leaves = [tensors[0].clone().requires_grad_(), tensors[1].clone().requires_grad_()]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            nll = (
                linear_log_probs(*leaves, None, targets, chunk_rows=6)[0]
                if chunked
                else _dense(*leaves, None, targets, None)[0]
            )
            loss = (nll * row_weights).sum()
        loss.backward()
        results.append((loss.detach(), [leaf.grad for leaf in leaves]))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=2e-2, atol=2e-2)
    for actual, expected in zip(results[1][1], results[0][1]):
        assert_close_to_scale(actual, expected, 5e-2)


def test_op_without_statistics_gives_the_same_log_probs_and_none():
    # a reference model's call (passes/label_sparsity/reference_calls.py): TRL reads its log-probs only
    tensors, targets, _ = _inputs(19, 500, 12, bias=True)
    with torch.no_grad():
        nll, *stats = linear_log_probs(*tensors, targets, chunk_rows=4, want_stats=False)
        full = linear_log_probs(*tensors, targets, chunk_rows=4)
        expected = _dense(*tensors, targets, None)
    assert stats == [None, None, None]
    assert torch.equal(nll, full[0])
    torch.testing.assert_close(nll, expected[0], rtol=1e-5, atol=1e-6)


def test_the_recomputed_weight_gradient_runs_in_the_half_dtype_where_cuda_would(monkeypatch):
    """On CUDA under autocast the backward's dW matmul takes the half dtype, summed in fp32 (an in-place addmm_ is
    never cast by autocast: it was an fp32 GEMM there). The CPU has no fp32-output half matmul, so the choice is
    made as CUDA's here and add_weight_grad's CPU branch computes the same product."""
    from turbotrain.passes.chunked_ce import cuda

    monkeypatch.setattr(cuda, "compute_dtype_for", lambda device, weight_dtype, autocast: autocast)
    calls = []
    real = cuda.add_weight_grad
    monkeypatch.setattr(cuda, "add_weight_grad", lambda dw, dz_t, h, first: calls.append(
        (dz_t.dtype, h.dtype, first)) or real(dw, dz_t, h, first))  # fmt: skip
    tensors, targets, row_weights = _inputs(21, 1500, 16, bias=False)
    results = []
    for chunked in (False, True):
        leaves = [tensors[0].clone().requires_grad_(), tensors[1].clone().requires_grad_()]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            nll = linear_log_probs(*leaves, None, targets, chunk_rows=6)[0] if chunked else _dense(
                *leaves, None, targets, None)[0]  # fmt: skip
            loss = (nll * row_weights).sum()
        loss.backward()
        results.append([leaf.grad for leaf in leaves])
    assert calls == [(torch.bfloat16, torch.bfloat16, True)] + [(torch.bfloat16, torch.bfloat16, False)] * 3
    for actual, expected in zip(results[1], results[0]):
        assert_close_to_scale(actual, expected, 5e-2)
