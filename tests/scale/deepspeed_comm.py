"""The scale tests' DeepSpeed ranks talk through torch.distributed's gloo alone.

On a Linux CPU, DeepSpeed compiles its shared-memory all-reduce op (`deepspeed_shm_comm`, C++ built with the
JIT extension loader) the first time a process group starts on a machine: 45-90 s once per fresh machine,
so once per CI run, charged to whichever test launches DeepSpeed first. These tests compare turbotrain with
stock under the same engine; how DeepSpeed moves bytes between ranks is not what they test, so the workers
mark that op unavailable before DeepSpeed starts, and DeepSpeed takes the path it takes wherever the op does
not build (torch.distributed's own collectives: gloo here).
"""

from __future__ import annotations


def without_shm_comm_op() -> None:
    """Before DeepSpeed's process group starts: its CPU shared-memory op counts as not compatible."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
