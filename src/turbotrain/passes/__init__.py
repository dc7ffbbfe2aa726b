"""Exact rewrites of the model or the batch. Each pass: its exactness argument in its docstring, and its
`PassSpec` registered at its bottom (registry.py); the import below registers them. What stands where in this
folder (a pass a file, or a folder with its helpers; the shared machinery): docs/layout.md.

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
    lean_gated_mlp,
    padding_free,
)
from turbotrain.passes.fused_optimizer import fused_adamw, has_fused_adamw, resolve_optim_name
from turbotrain.passes.label_sparsity import LabelSparsity, apply_label_sparsity, find_head
from turbotrain.passes.optimize import OptimizeReport, optimize
from turbotrain.passes.padding_free import scored_calls  # noqa: F401  (registers padding-free's scored-call variant)

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
