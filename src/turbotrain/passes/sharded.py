"""Parameters a sharding engine holds: which engine shards a model's, and where the self-checks see them whole.

* `engine_of(model)`: "DeepSpeed ZeRO-3" when a parameter is a ZeRO-3 partition (DeepSpeed marks each with
  `ds_id`; Transformers builds a model partitioned, under `deepspeed.zero.Init`, when the run's arguments
  hold a ZeRO-3 config before the model is made), "FSDP2" when one is a DTensor (`fully_shard`), None for
  whole parameters. `engine_of` is what the passes read at install; the trainer names the run's engine from its
  arguments (`hf_boundary.sharding_engine`), as the engine may shard the model only when training starts.
* `whole_parameters(model)`: a context inside which the model's parameters are whole, for the passes' install-time
  self-checks (each runs the model's forward and backward on a tiny batch, which a ZeRO-3 partition, an empty
  tensor, cannot: "'weight' must be 2-D"). ZeRO-3: DeepSpeed's own gather, `deepspeed.zero.GatheredParameters`
  over every parameter with `modifier_rank=None` (every rank gathers, none writes back); on exit each rank keeps its
  partition again and frees the gathered copy. Cost: one whole copy of the parameters on each rank for the length
  of the checks (seconds), never during training. A collective: every rank enters it, as TurboTrainer installs
  the passes on every rank alike. FSDP2 needs nothing: its forward hooks unshard each module's parameters for the
  call, and the checks go through the model's forward. Whole parameters: nothing to do.

In training the passes read the head's weight inside the head module's own forward (passes/chunked_ce/), where the
engine's pre-forward hook has gathered it (ZeRO-3) or unsharded it (FSDP2), and hand its gradient to autograd,
whose accumulation the engine reduces and partitions as stock's.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

ZERO3 = "DeepSpeed ZeRO-3"
FSDP2 = "FSDP2"


def engine_of(model: nn.Module) -> str | None:
    """The engine whose shards the model's parameters are now (ZERO3, FSDP2), or None."""
    dtensor = _dtensor_class()
    for parameter in model.parameters():
        if hasattr(parameter, "ds_id"):
            return ZERO3
        if dtensor is not None and isinstance(parameter, dtensor):
            return FSDP2
    return None


def _dtensor_class():
    if not torch.distributed.is_available():
        return None
    from torch.distributed.tensor import DTensor

    return DTensor


@contextlib.contextmanager
def whole_parameters(model: nn.Module):
    """The model's parameters whole inside (ZeRO-3: gathered on every rank, partitioned again on exit)."""
    if engine_of(model) != ZERO3:
        yield
        return
    import deepspeed  # imported already: its partitions are the model's parameters

    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
        yield
