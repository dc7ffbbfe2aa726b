"""Exact rewrites of the model or the batch. Each pass: one file, its exactness argument in its docstring,
and its `PassSpec` registered at its bottom (registry.py); the import below registers them.

`optimize(model)` installs the model-level passes on a model for use with a plain `Trainer` or a
custom loop; `TurboTrainer` calls the same function.
"""

from turbotrain.passes import (  # noqa: F401  (registration: one line per pass module)
    chunked_ce,
    embedding_grad,
    fused_activation,
    fused_lora,
    fused_optimizer,
    label_sparsity,
    padding_free,
)
from turbotrain.passes.fused_optimizer import fused_adamw, has_fused_adamw, resolve_optim_name
from turbotrain.passes.label_sparsity import LabelSparsity, apply_label_sparsity, find_head
from turbotrain.passes.optimize import OptimizeReport, optimize

__all__ = [
    "LabelSparsity",
    "OptimizeReport",
    "apply_label_sparsity",
    "find_head",
    "fused_adamw",
    "has_fused_adamw",
    "optimize",
    "resolve_optim_name",
]
