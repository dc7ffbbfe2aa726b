"""What an installed model pass holds, with `remove()` to undo it: the handles of its hooks (`HookedPass`), or
the modules given a forward of its own (`ReplacedForwards`)."""

from __future__ import annotations

import types
from collections.abc import Callable


class HookedPass:
    """Base of the passes that work through module hooks; subclasses append to `self._handles`."""

    def __init__(self):
        self._handles: list = []

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def end_forward(self) -> None:
        """Drop what a forward that raised left behind (its `always_call` forward hook, which normally drops it,
        is skipped when a compiled forward raises); a pass holding state during a forward overrides it."""


class ReplacedForwards:
    """Base of the passes that run some modules through their own `forward(module, *args, **kwargs)`, bound on each
    of `modules` as an instance attribute over its class's; `remove()` restores stock's."""

    def __init__(self, modules: list, forward: Callable):
        self.modules = modules
        for module in modules:
            module.forward = types.MethodType(forward, module)

    def remove(self) -> None:
        for module in self.modules:
            module.__dict__.pop("forward", None)
        self.modules = []
