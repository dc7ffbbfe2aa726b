"""The hosts of a pod: joining jax's distributed runtime, and the little the hosts agree on each step.

One process per host (a TPU VM worker, a GPU node driving all its GPUs, a simulated host on one machine).
`connect(host_timeout_s)` joins jax's distributed runtime before the backend's first jax computation,
from what the launcher provides, in this order:

* `jax.distributed.initialize()` already called by the user's script: used as it is;
* `JAX_COORDINATOR_ADDRESS` with `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID` (jax's own names);
* torchrun's `MASTER_ADDR` / `MASTER_PORT` / `WORLD_SIZE` / `RANK` with `WORLD_SIZE` > 1: the jax
  coordinator listens on `MASTER_PORT + 1` (torch's own store holds `MASTER_PORT`);
* a Cloud TPU VM (`libtpu` installed): `jax.distributed.initialize()` finds the slice's workers itself
  (on a one-host TPU VM that is a pod of one);
* otherwise: this host alone, no distributed runtime.

jax's heartbeat limit is set to 3 x `host_timeout_s` + 30 s (at least jax's 100 s), so turbotrain's
own watchdog (watchdog.py), which stops the survivors of a lost host with one message, speaks first.

Per step, the hosts agree on three integers with one small all-gather (`Hosts.agree`): the sequence
length to pad to and the label-sparsity row count (the maxima: every host's arrays must have one
shape), and the loss's item count (the sum: the global batch's `num_items_in_batch`). On one host
`agree` returns its arguments and costs nothing.

Trainer without torch.distributed (the TPU VM and `JAX_*` launches) sees one process of one; on
host p turbotrain sets accelerate's process index to p (`claim_process_index`), so Trainer's own rules
(`args.should_save`, `is_world_process_zero()`) write checkpoints and `save_pretrained` output from
host 0 only, as under torchrun. Under torchrun Trainer's torch.distributed world must be the jax pod
(one process per host, same ranks); then Trainer shards the data and picks the saving process itself.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from typing import NamedTuple

import jax
import numpy as np

logger = logging.getLogger("turbotrain")
TORCHRUN_PORT_OFFSET = 1  # the jax coordinator's port next to torch's MASTER_PORT


class Launch(NamedTuple):
    """Where the coordinator is and which process this is, as a launcher gives them."""

    coordinator: str | None  # None: jax detects the cluster itself (Cloud TPU VM)
    processes: int | None
    process_id: int | None
    source: str


def _required_int(environ, name: str, source: str) -> int:
    if name not in environ:
        raise ValueError(f"turbotrain xla: {source} is set but {name} is not; set both to launch several hosts")
    return int(environ[name])


def launch_environment(environ=os.environ) -> Launch | None:
    """The launch this process is part of, from its environment, or None for one host alone."""
    if environ.get("JAX_COORDINATOR_ADDRESS"):
        source = "JAX_COORDINATOR_ADDRESS"
        return Launch(
            environ["JAX_COORDINATOR_ADDRESS"],
            _required_int(environ, "JAX_NUM_PROCESSES", source),
            _required_int(environ, "JAX_PROCESS_ID", source),
            "JAX_* variables",
        )
    if int(environ.get("WORLD_SIZE", "1")) > 1 and environ.get("MASTER_ADDR"):
        port = int(environ.get("MASTER_PORT", "29500")) + TORCHRUN_PORT_OFFSET
        rank = _required_int(environ, "RANK", "WORLD_SIZE")
        return Launch(f"{environ['MASTER_ADDR']}:{port}", int(environ["WORLD_SIZE"]), rank, "torchrun variables")
    if importlib.util.find_spec("libtpu") is not None:
        return Launch(None, None, None, "Cloud TPU VM")
    return None


@dataclass(frozen=True)
class Hosts:
    """This process's place in the pod (count 1: a single host)."""

    count: int = 1
    index: int = 0

    @property
    def several(self) -> bool:
        return self.count > 1

    def agree(self, length: int, labelled: int, items: int | None, items_are_global: bool) -> tuple[int, int, int]:
        """(max length, max labelled rows, total items) over the hosts; `items` summed unless already global."""
        if not self.several:
            return length, labelled, items or 0
        from jax.experimental import multihost_utils

        mine = np.asarray([length, labelled, items or 0], dtype=np.int32)
        every = np.asarray(multihost_utils.process_allgather(mine))  # [hosts, 3]
        total_items = int(mine[2]) if items_are_global else int(every[:, 2].sum())
        return int(every[:, 0].max()), int(every[:, 1].max()), total_items

    def check_same_weights(self, params: dict) -> None:
        """Refuse to train when the hosts start from different weights (a model built without a seed)."""
        if not self.several:
            return
        from jax.experimental import multihost_utils

        sums = [(np.sum(value, dtype=np.float64), np.sum(np.abs(value), dtype=np.float64)) for value in params.values()]
        mine = np.asarray(np.sum(sums, axis=0), dtype=np.float32)
        every = np.asarray(multihost_utils.process_allgather(mine))  # [hosts, 2]
        differ = [host for host in range(self.count) if not np.array_equal(every[host], every[0])]
        if differ:
            raise ValueError(
                f"turbotrain xla: the model's weights on host(s) {differ} differ from host 0's; build the model "
                "the same way on every host (transformers.set_seed before creating it, or from_pretrained of one "
                "checkpoint)"
            )


def connect(host_timeout_s: float) -> Hosts:
    """Join the pod this process was launched into (see the module docstring); one host if none."""
    if not _initialized():
        launch = launch_environment()
        if launch is not None:
            _initialize(launch, host_timeout_s)
    return Hosts(jax.process_count(), jax.process_index())


def _initialized() -> bool:
    is_initialized = getattr(jax.distributed, "is_initialized", None)  # newer jax
    if is_initialized is not None:
        return bool(is_initialized())
    from turbotrain.backends.xla.watchdog import coordination_client

    return coordination_client() is not None


def jax_heartbeat_s(host_timeout_s: float) -> int:
    """jax's heartbeat limit: well past the watchdog's (jax may see a host's last heartbeat some seconds
    before it stopped, and aborts with pages of logs where the watchdog prints one line)."""
    return max(100, int(3 * host_timeout_s) + 30)


def _initialize(launch: Launch, host_timeout_s: float) -> None:
    heartbeat = jax_heartbeat_s(host_timeout_s)
    try:
        jax.distributed.initialize(
            launch.coordinator, launch.processes, launch.process_id, heartbeat_timeout_seconds=heartbeat
        )
    except RuntimeError as error:  # jax ran before train() in this process: too late to join a pod
        if "before any JAX computations" not in str(error):
            raise
        logger.warning(
            "turbotrain xla: %s found, but jax was already used in this process, so it runs on its own "
            "devices only; call jax.distributed.initialize() before any jax work to train across hosts",
            launch.source,
        )
        return
    except ValueError as error:  # a TPU VM whose cluster jax could not detect
        if launch.coordinator is not None:
            raise
        logger.info("turbotrain xla: one host (%s: %s)", launch.source, error)
        return
    logger.info(
        "turbotrain xla: process %d of %d joined the pod (%s)", jax.process_index(), jax.process_count(), launch.source
    )


def claim_process_index(args, hosts: Hosts) -> None:
    """Make Trainer see this host's rank: accelerate's process index is set to it when Trainer runs
    without torch.distributed; under torchrun, check Trainer's world is the pod."""
    if not hosts.several:
        return
    if args.world_size > 1:
        if (args.world_size, args.process_index) != (hosts.count, hosts.index):
            raise ValueError(
                f"turbotrain xla: torch.distributed has {args.world_size} processes (this one rank "
                f"{args.process_index}) but the jax pod has {hosts.count} (this one {hosts.index}); launch one "
                "process per host (torchrun --nproc-per-node=1), each driving all of its host's devices"
            )
        return
    if args.distributed_state is None:
        raise RuntimeError("turbotrain xla: Trainer's arguments have no accelerate state to record the host index in")
    args.distributed_state.process_index = hosts.index
