"""A peer that patches Transformers for the whole process, undone after it: Liger-Kernel's
`apply_liger_kernel_to_<model>` (Trainer's `use_liger_kernel=True`) replaces names in Transformers' model files
(`modeling_qwen2.apply_rotary_pos_emb`, `Qwen2RMSNorm`, `Qwen2MLP`, ...) and methods of their classes, the model
passed or not. Without this, every peer measured after the `liger` one, stock included, would run Liger's
kernels: the ratios would compare Liger with Liger.

`transformers_patches_undone()`: around one peer's run, the module globals of every loaded
`transformers.models.*` module and the attributes of the classes they define are put back as they were
(names a patch added are removed; submodules imported meanwhile stay). Models built inside keep what they were built with.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from types import ModuleType

PREFIX = "transformers.models."
_FIXED = ("__dict__", "__weakref__")


def _model_modules() -> dict[str, ModuleType]:
    return {name: module for name, module in list(sys.modules.items()) if name.startswith(PREFIX) and module}


def _own_classes(module: ModuleType) -> list[type]:
    return [value for value in vars(module).values() if isinstance(value, type) and value.__module__ == module.__name__]


@contextlib.contextmanager
def transformers_patches_undone() -> Iterator[None]:
    modules = _model_modules()
    globals_before = {name: dict(vars(module)) for name, module in modules.items()}
    classes_before = {cls: dict(vars(cls)) for module in modules.values() for cls in _own_classes(module)}
    try:
        yield
    finally:
        for name, module in modules.items():
            _restore(module, globals_before[name], vars(module))
        for cls, before in classes_before.items():
            _restore(cls, before, dict(vars(cls)))


def _restore(owner, before: dict, now: dict) -> None:
    for key in now.keys() - before.keys():
        if key not in _FIXED and not isinstance(now[key], ModuleType):  # a submodule imported meanwhile stays
            delattr(owner, key)
    for key, value in before.items():
        if key not in _FIXED and now.get(key) is not value:
            setattr(owner, key, value)
