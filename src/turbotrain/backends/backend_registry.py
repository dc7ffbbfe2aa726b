"""Name -> backend class. Adding a backend is adding one file that calls `register_backend`."""

from __future__ import annotations

from turbotrain.backends.base import Backend

AUTO = "auto"  # the default: a backend of its own (auto.py) that measures eager against inductor
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
    return [AUTO, *(name for name in backend_names() if name != AUTO)]


def backend_class(name: str) -> type[Backend]:
    """The backend class registered as `name` (the one check of a backend name: unknown names raise)."""
    if name not in _BACKENDS:
        raise ValueError(f"unknown backend '{name}'; valid backends: {', '.join(valid_choices())}")
    return _BACKENDS[name]


def get_backend(name: str, options: dict | None = None) -> Backend:
    """A new backend `name` with `options` (its `backend_options`) parsed into its typed options class."""
    cls = backend_class(name)
    return cls(cls.options_class.from_dict(options, name))
