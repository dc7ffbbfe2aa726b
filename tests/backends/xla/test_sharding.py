"""sharding.py: which dimension FSDP splits (the largest one the device count divides; none: replicated)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.requires_xla

from turbotrain.backends.xla.sharding import split_dimension  # noqa: E402


def test_the_largest_divisible_dimension_is_split():
    assert split_dimension((97, 32), 4) == 1  # an odd vocabulary: the hidden dimension
    assert split_dimension((128, 32), 4) == 0
    assert split_dimension((64, 64), 4) == 0  # the first of equals
    assert split_dimension((32,), 4) == 0


def test_no_divisible_dimension_or_one_device_replicates():
    assert split_dimension((97,), 4) is None
    assert split_dimension((), 4) is None
    assert split_dimension((128, 32), 1) is None
