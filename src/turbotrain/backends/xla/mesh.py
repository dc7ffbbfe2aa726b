"""The device mesh of the xla backend and the shardings of what a step reads and writes.

One axis, `data`, over every device of every host, ordered by host then device id, so each host's
devices are one contiguous block of it. The batch dimension is split along it (each host gives its own
block of rows, `host_block`); XLA inserts the gradient all-reduce. Parameters and AdamW moments are
replicated along it, or split along it with `shard="fsdp"` (sharding.py).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"


def data_parallel_mesh(num_devices: int | None = None) -> Mesh:
    """A 1-D mesh over the first `num_devices` devices (all of them by default; all on several hosts)."""
    devices = sorted(jax.devices(), key=lambda device: (device.process_index, device.id))
    if num_devices is not None:
        if not 1 <= num_devices <= len(devices):
            raise ValueError(f"num_devices={num_devices}, but jax sees {len(devices)} device(s): {devices}")
        if jax.process_count() > 1 and num_devices != len(devices):
            raise ValueError(
                f"num_devices={num_devices}: on {jax.process_count()} hosts the mesh spans all "
                f"{len(devices)} devices (leave num_devices unset)"
            )
        devices = devices[:num_devices]
    return Mesh(np.array(devices), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def split_batch(mesh: Mesh, leading_axes: int = 0) -> NamedSharding:
    """Split the dimension after `leading_axes` unsharded ones (micro-batch stacks are [A, B, ...])."""
    return NamedSharding(mesh, PartitionSpec(*([None] * leading_axes), DATA_AXIS))


def local_devices(mesh: Mesh) -> list:
    """This host's devices in the mesh, in mesh order."""
    return [device for device in mesh.devices.flat if device.process_index == jax.process_index()]


def host_block(mesh: Mesh) -> int:
    """Which block of the batch dimension this host's devices hold (its rank among the mesh's hosts)."""
    flat = list(mesh.devices.flat)
    mine = [position for position, device in enumerate(flat) if device.process_index == jax.process_index()]
    if not mine or mine != list(range(mine[0], mine[0] + len(mine))) or mine[0] % len(mine):
        raise ValueError(f"turbotrain xla: this host's devices are not one block of the mesh: {flat}")
    return mine[0] // len(mine)
