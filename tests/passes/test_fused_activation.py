"""Fused tanh GELU: same loss and gradients as the stock model (fp32 1e-5), undone by remove()."""

from __future__ import annotations

import torch

from tests.tiny_models import make
from turbotrain.modeling import synthetic_batch
from turbotrain.passes.fused_activation import FusedGELUTanh, apply_fused_activation
from turbotrain.passes.optimize import optimize


def loss_and_grads(model, batch):
    model.zero_grad()
    loss = model(**batch).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_gpt2_gelu_new_is_fused_with_the_same_loss_and_gradients():
    stock, fused = make("gpt2", dropout=False), make("gpt2", dropout=False)
    installed = apply_fused_activation(fused)
    assert installed is not None and isinstance(fused.transformer.h[0].mlp.act, FusedGELUTanh)
    for seed, lengths in ((0, [37, 37, 37]), (1, [1, 20, 37])):
        batch = synthetic_batch(stock, lengths, seed=seed)
        loss, grads = loss_and_grads(stock, batch)
        loss_f, grads_f = loss_and_grads(fused, batch)
        print(f"loss {loss.item():.8f} vs {loss_f.item():.8f}")
        assert torch.allclose(loss_f, loss, rtol=1e-5, atol=0)
        for name, grad in grads.items():
            assert (grads_f[name] - grad).abs().max() <= 1e-5 * grad.abs().max().clamp_min(1e-12), name
    installed.remove()
    assert type(fused.transformer.h[0].mlp.act).__name__ == "NewGELUActivation"


def test_bf16_stays_close():
    stock, fused = make("gpt2", dropout=False, dtype=torch.bfloat16), make("gpt2", dropout=False, dtype=torch.bfloat16)
    apply_fused_activation(fused)
    batch = synthetic_batch(stock, [37, 37], seed=2)
    assert torch.allclose(fused(**batch).loss.float(), stock(**batch).loss.float(), rtol=1e-2)


def test_models_without_tanh_gelu_are_left_alone():
    model = make("roberta")
    assert apply_fused_activation(model) is None
    assert "fused_activation" not in optimize(model).applied
    assert "fused_activation" in optimize(make("gpt2")).applied
