"""tests/conftest.py's ordering: the slowest modules are collected first, the rest keep their order."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOWEST_FIRST, slowest_first

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_named_slowest_first_exists():
    assert [path for path in SLOWEST_FIRST if not (ROOT / path).is_file()] == []


def test_the_slowest_modules_come_first_and_the_rest_keep_their_order():
    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    names = ["tests/a.py::x", SLOWEST_FIRST[1] + "::y", "tests/b.py::z", SLOWEST_FIRST[0] + "::w", "tests/a.py::v"]
    items = [Item(name) for name in names]
    slowest_first(items)
    assert [item.nodeid for item in items] == [names[3], names[1], names[0], names[2], names[4]]
