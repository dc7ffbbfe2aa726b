"""jax and torch on one GPU: jax allocates on demand instead of taking most of the card up front.

By default jax's GPU client preallocates 75% of each visible GPU's memory when it starts. With the xla
backend on a CUDA machine the torch model already sits on that GPU (Trainer moves it there), so the two
would fight over one card: out of memory in whichever asks second. `share_gpu_with_torch(device)`, called
before anything starts jax's GPU client, sets `XLA_PYTHON_CLIENT_PREALLOCATE=false` (jax then allocates as
it goes, and frees to its own pool) unless the user set it or `XLA_PYTHON_CLIENT_MEM_FRACTION` themselves
(their setting stands). If jax's GPU client already started with preallocation on, it is too late to change,
and the backend is refused with what to set. Nothing happens for a run on the CPU or a TPU.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, MutableMapping

import torch

from turbotrain.backends.base import BackendUnavailable

logger = logging.getLogger("turbotrain")
PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
MEM_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION"


def jax_gpu_started() -> bool:
    """Whether jax has already started a GPU client in this process (then its memory settings are fixed)."""
    if "jax" not in sys.modules:
        return False
    bridge = importlib.import_module("jax._src.xla_bridge")
    started = getattr(bridge, "backends_are_initialized", None)
    if started is None or not started():
        return False
    import jax

    return jax.default_backend() in ("gpu", "cuda", "rocm")


def share_gpu_with_torch(
    device: torch.device | str,
    environ: MutableMapping[str, str] = os.environ,
    gpu_started: Callable[[], bool] = jax_gpu_started,
) -> str | None:
    """Turn jax's preallocation off for a run whose torch side is on a GPU; what was done, or None (docstring)."""
    if torch.device(device).type != "cuda":
        return None
    if PREALLOCATE in environ or MEM_FRACTION in environ:
        return None  # the user's own setting
    if gpu_started():
        raise BackendUnavailable(
            "backend 'xla': jax started its GPU client before the run, preallocating 75% of the GPU that the torch "
            f"model is on; set {PREALLOCATE}=false in the environment before jax is first used"
        )
    environ[PREALLOCATE] = "false"
    done = f"{PREALLOCATE}=false: jax allocates on demand beside torch on the same GPU"
    logger.info("turbotrain xla: %s", done)
    return done
