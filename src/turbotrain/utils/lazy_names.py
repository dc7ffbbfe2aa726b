"""A package's names imported on first use: its `__getattr__` and `__dir__` made from one table, name -> module.

Used by the package's front (`turbotrain/__init__.py`: `turbotrain.ondevice` loads without torch) and by
`pretrain/` (`turbotrain pretrain --help` parses without Transformers). Imports nothing itself but importlib.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_names(package: str, table: dict[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """(`__getattr__`, `__dir__`) for the module `package` whose globals are `namespace`: a name of `table` is
    imported from its module on first use and kept in `namespace`; any other name is an AttributeError."""

    def __getattr__(name: str):
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(table[name]), name)
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *table])

    return __getattr__, __dir__
