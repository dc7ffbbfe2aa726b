"""What an installed model pass holds: the handles of its hooks, and `remove()` to take them off."""

from __future__ import annotations


class HookedPass:
    """Base of the passes that work through module hooks; subclasses append to `self._handles`."""

    def __init__(self):
        self._handles: list = []

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
