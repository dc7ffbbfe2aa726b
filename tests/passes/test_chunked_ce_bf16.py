"""The chunked head under CPU bf16 autocast gives stock autocast's dense head loss and every gradient within bf16
tolerance: with stock autocast's matmuls and with the bf16 emulation (bf16_emulation.py)."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

from turbotrain.passes.chunked_ce import linear_cross_entropy
from turbotrain.training.bf16_emulation import Bf16Emulation


def head_loss(chunked: bool, emulate: bool, rows=37, vocab=1000, hidden=24, bias=True, seed=0):
    generator = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, hidden, generator=generator)
    weight = torch.randn(vocab, hidden, generator=generator) * 0.2
    b = torch.randn(vocab, generator=generator) * 0.1 if bias else None
    targets = torch.randint(0, vocab, (rows,), generator=generator)
    leaves = [t.clone().requires_grad_() for t in (h, weight, *([b] if bias else []))]
    emulation = Bf16Emulation() if emulate else contextlib.nullcontext()
    with torch.autocast("cpu", torch.bfloat16), emulation:
        bias_leaf = leaves[2] if bias else None
        if chunked:
            nll = linear_cross_entropy(leaves[0], leaves[1], bias_leaf, targets, chunk_rows=8)
        else:
            nll = F.cross_entropy(F.linear(leaves[0], leaves[1], bias_leaf).float(), targets, reduction="none")
        loss = nll.sum() / rows
    loss.backward()
    return loss.detach(), [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("emulate", [False, True], ids=["stock_matmuls", "emulated"])
@pytest.mark.parametrize("bias", [False, True])
def test_chunked_head_matches_stock_autocast_dense_head(emulate, bias):
    stock_loss, stock_grads = head_loss(chunked=False, emulate=False, bias=bias)
    loss, grads = head_loss(chunked=True, emulate=emulate, bias=bias)
    torch.testing.assert_close(loss, stock_loss, rtol=5e-3, atol=0)
    for stock_grad, grad in zip(stock_grads, grads):
        assert grad.dtype == stock_grad.dtype
        scale = stock_grad.abs().max().item()
        torch.testing.assert_close(grad, stock_grad, rtol=2e-2, atol=2e-2 * scale)


def test_emulated_dense_head_matches_stock_autocast():
    stock_loss, stock_grads = head_loss(chunked=False, emulate=False)
    loss, grads = head_loss(chunked=False, emulate=True)
    torch.testing.assert_close(loss, stock_loss, rtol=2e-3, atol=0)
    for stock_grad, grad in zip(stock_grads, grads):
        torch.testing.assert_close(grad, stock_grad, rtol=2e-2, atol=2e-2 * stock_grad.abs().max().item())
