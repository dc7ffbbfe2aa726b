"""The compiled training step: forward, backward, clipping and the AdamW update in one XLA program.

`CompiledStep(...)(state, frozen, arrays, num_items, learning_rate, key) -> (state, loss, grad_norm)`

* `arrays`: the step's micro-batches from `batches.step_arrays`, [A, B, L, ...] (A micro-batches of
  gradient accumulation, B split over the mesh's data axis), plus [A, K] kept rows for label sparsity.
* The model runs through torchax: its torch code traces into jax with the weights substituted by
  `torch.func.functional_call` (tied weights stay tied). It is called with `return_dict=False` and
  the loss is taken out inside the traced function (Transformers' output objects cannot cross
  `jax.jit`). With `num_items` (the model accepts loss kwargs, as Trainer decides) every micro-batch
  loss is sum / num_items over the whole step; without it each is its mean divided by A, as Trainer does.
* Gradients are summed over the A micro-batches (`lax.scan`), clipped like torch, then torch's AdamW.
* Dropout draws from jax's PRNG with a key per step (`key`), not from torch's generator: the same
  distribution, different draws than eager.
* One compile per distinct input shape; `batches.py` keeps the shapes few. The state is donated and
  comes back placed as `state_sharding` says (replicated, or split with `shard="fsdp"`, sharding.py).
* `autocast_dtype=torch.bfloat16` (Trainer's `bf16=True`): torchax's autocast runs the ops torch's CPU
  autocast lowers (matmuls, linear, attention) in bf16 with the rest in their input dtype, like
  `torch.autocast` in eager; weights, gradients and AdamW stay fp32 (master weights), the loss is fp32.
* On several hosts each host passes its own rows (`place`: its block of the batch dimension, built with
  `jax.make_array_from_process_local_data`); scalars travel as numpy values, the same on every host.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from torch import nn

from turbotrain.backends.xla.batches import KEPT, ROWS
from turbotrain.backends.xla.mesh import replicated, split_batch
from turbotrain.backends.xla.optimizer import clip_like_torch, with_learning_rate
from turbotrain.backends.xla.state import TrainState
from turbotrain.backends.xla.torchax_compat import import_torchax
from turbotrain.boundaries.jax_boundary import jit_cache_size


class CompiledStep:
    def __init__(
        self,
        model: nn.Module,
        max_grad_norm: float | None,
        adamw: optax.GradientTransformation,
        mesh,
        sparsity=None,
        matmul_precision: str = "highest",
        state_sharding=None,
        autocast_dtype: torch.dtype | None = None,
    ):
        self.model = model
        self.max_grad_norm = max_grad_norm
        self.adamw = adamw
        self.mesh = mesh
        self.sparsity = sparsity
        self.matmul_precision = matmul_precision
        self.autocast_dtype = autocast_dtype
        self.env = import_torchax().default_env()
        self.compiled_shapes: set[tuple] = set()
        self.host_count = len({device.process_index for device in mesh.devices.flat})
        whole = replicated(mesh)
        self._jitted = jax.jit(self._step, out_shardings=(state_sharding or whole, whole, whole), donate_argnums=(0,))

    def _micro_loss(self, params, frozen, micro, num_items, key, micro_count):
        env = self.env
        with env, env.override_property(prng=key, autocast_dtype=self.autocast_dtype):
            weights, inputs, items = env.j2t_iso(({**params, **frozen}, micro, num_items))
            kwargs = {name: value for name, value in inputs.items() if name not in (ROWS, KEPT)}
            if items is not None:
                kwargs["num_items_in_batch"] = items
            rows = self.sparsity.static_rows(inputs[ROWS], inputs[KEPT]) if ROWS in inputs else contextlib.nullcontext()
            with rows:
                outputs = torch.func.functional_call(
                    self.model, weights, args=(), kwargs={**kwargs, "return_dict": False}
                )
            loss = outputs[0] if items is not None else outputs[0] / micro_count
            return env.t2j_iso(loss).astype(jnp.float32)

    def _grads(self, params, frozen, arrays, num_items, key):
        micro_count = next(iter(arrays.values())).shape[0]
        value_and_grad = jax.value_and_grad(self._micro_loss)
        keys = jax.random.split(key, micro_count)
        if micro_count == 1:
            micro = {name: value[0] for name, value in arrays.items()}
            return value_and_grad(params, frozen, micro, num_items, keys[0], micro_count)

        def accumulate(carry, inputs):
            loss_sum, grad_sum = carry
            micro, micro_key = inputs
            loss, grads = value_and_grad(params, frozen, micro, num_items, micro_key, micro_count)
            return (loss_sum + loss, jax.tree.map(jnp.add, grad_sum, grads)), None

        start = (jnp.zeros([], jnp.float32), jax.tree.map(jnp.zeros_like, params))
        (loss, grads), _ = jax.lax.scan(accumulate, start, (arrays, keys))
        return loss, grads

    def _step(self, state: TrainState, frozen, arrays, num_items, learning_rate, key_data):
        loss, grads = self._grads(state.params, frozen, arrays, num_items, jax.random.wrap_key_data(key_data))
        grad_norm = optax.global_norm(grads)
        if self.max_grad_norm:
            grads = clip_like_torch(grads, grad_norm, self.max_grad_norm)
        updates, opt_state = self.adamw.update(grads, with_learning_rate(state.opt_state, learning_rate), state.params)
        return TrainState(optax.apply_updates(state.params, updates), opt_state), loss, grad_norm

    def compiles(self) -> int:
        """How many programs jax compiled for this step so far (one per input shape, ideally)."""
        return jit_cache_size(self._jitted)  # -1 where jax no longer says

    def used_label_sparsity(self) -> bool:
        return any(ROWS in dict(shape) for shape in self.compiled_shapes)

    def place(self, arrays: dict) -> dict:
        """One step's host arrays [A, B_host, ...] as global arrays [A, B_host x hosts, ...] on the mesh:
        the batch dimension (and the kept rows) split over the devices, this host's rows on its devices."""
        sharding = split_batch(self.mesh, leading_axes=1)
        return {
            name: jax.make_array_from_process_local_data(
                sharding, value, (value.shape[0], value.shape[1] * self.host_count, *value.shape[2:])
            )
            for name, value in arrays.items()
        }

    def __call__(self, state: TrainState, frozen, arrays: dict, num_items, learning_rate: float, key):
        self.compiled_shapes.add(tuple(sorted((name, value.shape) for name, value in arrays.items())))
        items = None if num_items is None else np.float32(float(num_items))
        key_data = np.asarray(jax.random.key_data(key))
        with jax.default_matmul_precision(self.matmul_precision):
            return self._jitted(state, frozen, self.place(arrays), items, np.float32(learning_rate), key_data)
