"""What executes the step. A registry maps a name to a small class; see `base.Backend` for the interface."""

from turbotrain.backends import auto, eager, inductor, onnxruntime, xla  # noqa: F401  (registration)
from turbotrain.backends.backend_registry import (
    AUTO,
    backend_class,
    backend_names,
    get_backend,
    register_backend,
    valid_choices,
)
from turbotrain.backends.base import Backend, BackendUnavailable

__all__ = [
    "AUTO",
    "Backend",
    "BackendUnavailable",
    "backend_class",
    "backend_names",
    "get_backend",
    "register_backend",
    "valid_choices",
]
