"""Tests of the xla backend. `requires_xla` skips them without the xla extra (checked by spec: torchax must
not be imported directly, see turbotrain/backends/xla/torchax_compat.py)."""

import pytest

from turbotrain.utils.imports import is_available

requires_xla = pytest.mark.skipif(
    not all(is_available(p) for p in ("jax", "torchax", "optax")),
    reason="needs the xla extra: pip install 'turbotrain[xla]'",
)
