"""eager: PyTorch runs the step op by op, as stock Trainer does. The reference every backend is tested against."""

from turbotrain.backends.base import Backend
from turbotrain.backends.registry import register_backend


@register_backend
class EagerBackend(Backend):
    name = "eager"
