"""Shared fixtures: every test starts with turbotrain's once-per-process warnings unsaid, so a test
that expects one does not depend on which tests ran before it."""

from __future__ import annotations

import pytest

from turbotrain.utils import warnings as turbotrain_warnings


@pytest.fixture(autouse=True)
def fresh_warnings():
    turbotrain_warnings._already_warned.clear()
    yield
