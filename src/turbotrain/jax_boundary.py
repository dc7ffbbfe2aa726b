"""The boundary with jax's private names (the xla backend's): every one turbotrain uses is used here.

* `jit_cache_size(jitted)`: how many programs a `jax.jit` function has compiled so far (its private
  `_cache_size()`), or -1 where a jax release no longer has it. Pinned, with torch's privates, by
  tests/test_torch_boundary.py. Nothing here imports jax: the jitted function is handed in.
"""

from __future__ import annotations

JIT_CACHE_SIZE = "_cache_size"


def jit_cache_size(jitted) -> int:
    return getattr(jitted, JIT_CACHE_SIZE, lambda: -1)()
