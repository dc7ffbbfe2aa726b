"""Where the training state lives: replicated (`shard="data"`) or split over the devices (`shard="fsdp"`).

With "fsdp" every parameter and both AdamW moments are split along the mesh's `data` axis (the axis
the batch is split on: FSDP / ZeRO-3), each on its largest dimension divisible by the device count;
a parameter with no such dimension (rare: an odd-sized bias) stays replicated. Frozen parameters,
buffers, the step count and the learning rate stay replicated. `jax.jit` follows these placements: XLA
all-gathers a weight where a layer reads it and reduce-scatters its gradient, so each device holds
about 1/N of the parameter + AdamW bytes (`bytes_per_device` measures it), for the cost of those
gathers in every forward and backward.

Placement and gathering work on one host and across hosts alike: `place` builds each global array
from the host's numpy copy, every device taking only its own shard (`jax.make_array_from_callback`);
`to_host` brings arrays back as numpy on every host (before evaluation, checkpoints and the end), a
split array across hosts through one all-gather per array (one compile per distinct shape), so no
device ever holds more than one whole parameter at a time.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from turbotrain.backends.xla.mesh import DATA_AXIS, replicated
from turbotrain.backends.xla.optimizer import TorchAdamWState
from turbotrain.backends.xla.state import TrainState


def split_dimension(shape: tuple[int, ...], devices: int) -> int | None:
    """The dimension FSDP splits: the largest one `devices` divides (the first of equals), or None."""
    divisible = [dim for dim, size in enumerate(shape) if size % devices == 0]
    if devices == 1 or not divisible:
        return None
    return max(divisible, key=lambda dim: shape[dim])


def parameter_sharding(mesh: Mesh, shape: tuple[int, ...], shard: str) -> NamedSharding:
    """Replicated for "data"; for "fsdp" split on `split_dimension` (replicated where there is none)."""
    dim = split_dimension(shape, mesh.shape[DATA_AXIS]) if shard == "fsdp" else None
    if dim is None:
        return replicated(mesh)
    return NamedSharding(mesh, PartitionSpec(*(DATA_AXIS if d == dim else None for d in range(len(shape)))))


def state_sharding(mesh: Mesh, params: dict, shard: str) -> TrainState:
    """The placement of every leaf of the TrainState for `params` (name -> array with a shape)."""
    per_param = {name: parameter_sharding(mesh, tuple(value.shape), shard) for name, value in params.items()}
    whole = replicated(mesh)
    return TrainState(per_param, TorchAdamWState(whole, dict(per_param), dict(per_param), whole))


def place(tree, shardings):
    """Host numpy arrays (the same on every host) as global arrays placed like `shardings`."""

    def one(value, sharding):
        value = np.asarray(value)
        return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

    return jax.tree.map(one, tree, shardings)


def _replicate(value):
    return value


def to_host(tree):
    """Global arrays back as numpy arrays, whole, on every host."""

    def one(value):
        if not isinstance(value, jax.Array):
            return np.asarray(value)
        if value.is_fully_addressable:
            return np.asarray(value)
        if not value.is_fully_replicated:
            value = jax.jit(_replicate, out_shardings=NamedSharding(value.sharding.mesh, PartitionSpec()))(value)
        return np.asarray(value.addressable_data(0))

    return jax.tree.map(one, tree)


def bytes_per_device(tree, device=None) -> int:
    """Bytes of `tree`'s arrays held on `device` (default: this host's first device of their mesh)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        target = device if device is not None else leaf.addressable_shards[0].device
        total += sum(shard.data.nbytes for shard in leaf.addressable_shards if shard.device == target)
    return total
