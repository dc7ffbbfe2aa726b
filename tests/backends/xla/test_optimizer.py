"""optimizer.py: torch_adamw and clip_like_torch follow torch.optim.AdamW and clip_grad_norm_ step by step
(changing learning rate, weight decay on some parameters only, clipping active and inactive)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.requires import lazy_module

jax = lazy_module("jax")
optax = lazy_module("optax")
xla_optimizer = lazy_module("turbotrain.backends.xla.optimizer")  # imports jax
pytestmark = pytest.mark.requires_xla

SHAPES = {"weight": (7, 5), "bias": (5,)}
DECAY = {"weight": True, "bias": False}


def test_matches_torch_adamw_with_clipping():
    generator = torch.Generator().manual_seed(0)
    torch_params = {name: torch.randn(shape, generator=generator, requires_grad=True) for name, shape in SHAPES.items()}
    optimizer = torch.optim.AdamW(
        [
            {"params": [torch_params["weight"]], "weight_decay": 0.1},
            {"params": [torch_params["bias"]], "weight_decay": 0.0},
        ],
        lr=1e-2,
        betas=(0.9, 0.98),
        eps=1e-6,
    )
    params = {name: jax.numpy.asarray(p.detach().numpy()) for name, p in torch_params.items()}
    adamw = xla_optimizer.torch_adamw(0.9, 0.98, 1e-6, 0.1, DECAY)
    state = adamw.init(params)
    for step, lr in enumerate([1e-2, 5e-3, 2e-2, 1e-3, 1e-2]):
        scale = 0.1 if step % 2 else 10.0  # alternately below and above the clipping norm
        grads = {name: torch.randn(shape, generator=generator) * scale for name, shape in SHAPES.items()}
        for group in optimizer.param_groups:
            group["lr"] = lr
        for name, p in torch_params.items():
            p.grad = grads[name].clone()
        torch.nn.utils.clip_grad_norm_(list(torch_params.values()), 1.0)
        optimizer.step()
        jax_grads = {name: jax.numpy.asarray(g.numpy()) for name, g in grads.items()}
        jax_grads = xla_optimizer.clip_like_torch(jax_grads, optax.global_norm(jax_grads), 1.0)
        updates, state = adamw.update(jax_grads, xla_optimizer.with_learning_rate(state, lr), params)
        params = optax.apply_updates(params, updates)
        for name, p in torch_params.items():
            np.testing.assert_allclose(
                np.asarray(params[name]), p.detach().numpy(), rtol=1e-6, atol=1e-6, err_msg=f"{name} at step {step + 1}"
            )
    assert int(state.count) == 5
    np.testing.assert_allclose(
        np.asarray(state.nu["weight"]), optimizer.state[torch_params["weight"]]["exp_avg_sq"], rtol=1e-6, atol=1e-9
    )
