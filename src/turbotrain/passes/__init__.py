"""Exact rewrites of the model or the batch. Each pass: its exactness argument in its docstring, and its
`PassSpec` registered at its bottom (registry.py); the import below registers them.

The passes stand at this folder's top: a pass is one file (`fused_lora.py`), or a folder when it has helpers
of its own, the pass in the folder's `__init__.py` and its helpers beside it (`padding_free/`: `packing.py`,
`packed_attention.py`, `packed_sequences.py`, `layer_masks.py`, `check.py`; `label_sparsity/`: `host_rows.py`,
`reference_calls.py`; `chunked_ce/`: `cuda.py`, `logprobs.py`; `embedding_grad/`: `tied_rows.py`). Also at
the top: the machinery every pass shares (`registry.py`, `optimize.py`, `installed.py`, `self_check.py`,
`sharded.py`), and `fused_head_calls.py`, which two passes share: label sparsity recognises TRL's
`fused_lm_head` calls and whether they can be answered, the chunked head (its part) answers them.

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
