"""The device mesh of the xla backend and the shardings of what a step reads and writes.

Today one axis, `data`: every local device holds the whole model and optimizer state (replicated) and
a slice of each batch (split along the batch dimension); XLA inserts the gradient all-reduce. The mesh
is named so parameter sharding (an `fsdp` axis, FSDP-style) can be added as a second axis without
changing the step. Multi-host: call `jax.distributed.initialize()` before training and the mesh spans
the global devices (`jax.devices()`); the data loading then has to give each host its own slice, which
is not built yet.
"""

from __future__ import annotations

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"


def data_parallel_mesh(num_devices: int | None = None) -> Mesh:
    """A 1-D mesh over the first `num_devices` devices (all of them by default)."""
    devices = jax.devices()
    if num_devices is not None:
        if not 1 <= num_devices <= len(devices):
            raise ValueError(f"num_devices={num_devices}, but jax sees {len(devices)} device(s): {devices}")
        devices = devices[:num_devices]
    return Mesh(devices, (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def split_batch(mesh: Mesh, leading_axes: int = 0) -> NamedSharding:
    """Split the dimension after `leading_axes` unsharded ones (micro-batch stacks are [A, B, ...])."""
    return NamedSharding(mesh, PartitionSpec(*([None] * leading_axes), DATA_AXIS))


def data_parallel_size(mesh: Mesh) -> int:
    return mesh.shape[DATA_AXIS]
