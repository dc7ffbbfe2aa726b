"""torch's AdamW as an optax transformation, and torch's gradient clipping, so the xla step updates
weights the way `TurboTrainer` on eager does.

`torch_adamw` follows `torch.optim.AdamW` (amsgrad off), per parameter and step t:

    p   <- p * (1 - lr * weight_decay)              decoupled weight decay, with this step's lr
    m   <- b1 * m + (1 - b1) * g
    v   <- b2 * v + (1 - b2) * g^2
    p   <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)    eps outside the sqrt

Weight decay applies to the parameters in `decay_mask` (Trainer: not biases and norms). The learning
rate is part of the state (`with_learning_rate`), so Trainer's scheduler drives it step by step.
`clip_like_torch` is `torch.nn.utils.clip_grad_norm_`: scale by min(1, max_norm / (norm + 1e-6)).
The state holds what torch's AdamW holds (`step`, `exp_avg`, `exp_avg_sq`), so checkpoints convert
both ways (state.py).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax


class TorchAdamWState(NamedTuple):
    count: jax.Array  # steps taken (torch's `step`)
    mu: optax.Updates  # torch's `exp_avg`
    nu: optax.Updates  # torch's `exp_avg_sq`
    learning_rate: jax.Array


def torch_adamw(
    b1: float, b2: float, eps: float, weight_decay: float, decay_mask: dict
) -> optax.GradientTransformation:
    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return TorchAdamWState(
            jnp.zeros([], jnp.int32), zeros, jax.tree.map(jnp.zeros_like, params), jnp.zeros([], jnp.float32)
        )

    def update(grads, state, params):
        count = state.count + 1
        lr = state.learning_rate
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, grads)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state.nu, grads)
        t = count.astype(jnp.float32)
        step_size = lr / (1 - b1**t)
        bias_correction2_sqrt = jnp.sqrt(1 - b2**t)

        def delta(p, m, v, decays):
            decay = -lr * weight_decay * p if decays and weight_decay else jnp.zeros_like(p)
            return decay - step_size * m / (jnp.sqrt(v) / bias_correction2_sqrt + eps)

        updates = {name: delta(params[name], mu[name], nu[name], decay_mask[name]) for name in params}
        return updates, TorchAdamWState(count, mu, nu, lr)

    return optax.GradientTransformation(init, update)


def with_learning_rate(state: TorchAdamWState, learning_rate) -> TorchAdamWState:
    return state._replace(learning_rate=jnp.asarray(learning_rate, jnp.float32))


def clip_like_torch(grads: optax.Updates, norm: jax.Array, max_norm: float) -> optax.Updates:
    """`torch.nn.utils.clip_grad_norm_` given the global norm: scale by min(1, max_norm / (norm + 1e-6))."""
    scale = jnp.minimum(max_norm / (norm + 1e-6), 1.0)
    return jax.tree.map(lambda g: g * scale, grads)
