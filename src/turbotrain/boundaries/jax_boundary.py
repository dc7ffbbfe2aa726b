"""The boundary with jax's private names (the xla backend's): every one turbotrain uses is used here.

* `jit_cache_size(jitted)`: how many programs a `jax.jit` function has compiled so far (its private
  `_cache_size()`), or -1 where a jax release no longer has it. Pinned, with torch's privates, by
  tests/test_torch_boundary.py. Nothing here imports jax: the jitted function is handed in.
* `coordination_client()`: this process's client of jax's coordination service
  (`jax._src.distributed.global_state.client`: jax has no public handle), or None where it is missing; the
  xla backend's lost-host watchdog reads peers' heartbeats through it. Imports jax only when called.
"""

from __future__ import annotations

JIT_CACHE_SIZE = "_cache_size"


def jit_cache_size(jitted) -> int:
    return getattr(jitted, JIT_CACHE_SIZE, lambda: -1)()


def coordination_client():
    try:
        from jax._src import distributed
    except ImportError:
        return None
    return getattr(getattr(distributed, "global_state", None), "client", None)
