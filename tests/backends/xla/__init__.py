"""Tests of the xla backend: marked `requires_xla` (tests/requires.py: checked by spec, so torchax is not
imported directly; see turbotrain/backends/xla/torchax_compat.py)."""
