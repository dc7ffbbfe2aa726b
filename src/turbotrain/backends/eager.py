"""eager: PyTorch runs the step op by op, as stock Trainer does. The reference every backend is tested against."""

from turbotrain.backends.backend_registry import register_backend
from turbotrain.backends.base import Backend


@register_backend
class EagerBackend(Backend):
    name = "eager"
