"""Shared fixtures and markers: every test starts with turbotrain's once-per-process warnings unsaid, so a
test that expects one does not depend on which tests ran before it; and a test marked
`requires_<extra>` (tests/requires.py) is skipped, naming the install line, where its dependency is missing."""

from __future__ import annotations

import pytest

from tests import requires
from turbotrain.utils import warnings as turbotrain_warnings


def pytest_configure(config):
    for name, (_, install) in requires.REQUIREMENTS.items():
        config.addinivalue_line("markers", f"{requires.PREFIX}{name}: skipped without {install}")


def pytest_collection_modifyitems(config, items):
    for item in items:
        reasons = [requires.missing(m.name) for m in item.iter_markers() if m.name.startswith(requires.PREFIX)]
        missing = [reason for reason in reasons if reason is not None]
        if missing:
            item.add_marker(pytest.mark.skip(reason="; ".join(missing)))


@pytest.fixture(autouse=True)
def fresh_warnings():
    turbotrain_warnings._already_warned.clear()
    yield
