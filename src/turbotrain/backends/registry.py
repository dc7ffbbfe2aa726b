"""Name -> backend class. Adding a backend is adding one file that calls `register_backend`."""

from __future__ import annotations

import torch

from turbotrain.backends.base import Backend

AUTO = "auto"
AUTO_CANDIDATES = ("eager", "inductor")  # what "auto" may resolve to (see auto_backend)
_BACKENDS: dict[str, type[Backend]] = {}


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make `cls` selectable as `backend=cls.name`."""
    if cls.name in _BACKENDS and _BACKENDS[cls.name] is not cls:
        raise ValueError(f"backend name '{cls.name}' is already registered")
    _BACKENDS[cls.name] = cls
    return cls


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


def valid_choices() -> list[str]:
    return [AUTO, *backend_names()]


def auto_backend(device: torch.device) -> str:
    """The default choice per device until measured choices exist.

    eager on CPU: torch.compile measured slower than eager for training on 2-core CPUs (see benchmarks/);
    inductor on CUDA, where compiled kernels win.
    """
    return "inductor" if torch.device(device).type == "cuda" else "eager"


def options_class_for(name: str) -> list[type]:
    """The options classes `backend_options` must fit for `name` ("auto": every backend it may pick)."""
    names = AUTO_CANDIDATES if name == AUTO else (name,)
    return [_BACKENDS[n].options_class for n in names if n in _BACKENDS]


def resolve_backend_name(name: str, device: torch.device) -> str:
    if name == AUTO:
        return auto_backend(device)
    if name not in _BACKENDS:
        raise ValueError(f"unknown backend '{name}'; valid backends: {', '.join(valid_choices())}")
    return name


def get_backend(name: str, options: dict | None = None) -> Backend:
    """A new backend `name` with `options` (its `backend_options`) parsed into its typed options class."""
    if name not in _BACKENDS:
        raise ValueError(f"unknown backend '{name}'; valid backends: {', '.join(valid_choices())}")
    cls = _BACKENDS[name]
    return cls(cls.options_class.from_dict(options, name))
