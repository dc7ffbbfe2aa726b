"""The boundary with Liger-Kernel's names: what its per-instance patch (Trainer's `use_liger_kernel=True`) will
replace in a model, read from its table of patch functions. No policy here: the passes decide what to do about it.

Trainer (and every TRL trainer) with `use_liger_kernel=True` hands the model to Liger's
`_apply_liger_kernel_to_instance(model, **liger_kernel_config)` (Transformers 5.0 in `__init__`, later releases at
the start of `train()`), which looks the model's `config.model_type` up in `MODEL_TYPE_TO_APPLY_LIGER_FN` (a private
name of `liger_kernel.transformers.monkey_patch`, pinned by tests/boundaries/test_liger_boundary.py) and calls that
function with the config's keywords it takes, each defaulting as the function's signature says (Liger 0.8.2):
* `fused_linear_cross_entropy` (default on for the decoders): the model's forward becomes Liger's, which hands the
  hidden states and the head's weight to its fused loss in training and never calls the head module;
* `swiglu` / `geglu`: each gated MLP's forward becomes Liger's (bound on the instance);
* `rms_norm`, `rope`, `layer_norm`: norms' forwards and the module's rotary function; no turbotrain pass touches
  those.

Without liger-kernel nothing is patched here (Trainer raises its own ImportError naming the package), and a model
type Liger does not know is left as it is (Liger logs so).
"""

from __future__ import annotations

import importlib.util
import inspect

FORWARD = "fused_linear_cross_entropy"  # the model's forward: Liger's head and loss
MLP = ("swiglu", "geglu")  # each gated MLP's forward
LIGER_TABLE = "MODEL_TYPE_TO_APPLY_LIGER_FN"


def _patch_function(model):
    if importlib.util.find_spec("liger_kernel") is None:
        return None
    from liger_kernel.transformers import monkey_patch

    model_type = getattr(getattr(model, "config", None), "model_type", None)
    return getattr(monkey_patch, LIGER_TABLE, {}).get(model_type)


def liger_replaces(model, args) -> frozenset[str]:
    """What `use_liger_kernel=True` in `args` will have Liger replace in `model` (a PEFT wrapper reads its base
    model's config): "forward" (its fused head and loss), "mlp" (its gated MLP); empty where it replaces neither."""
    if not getattr(args, "use_liger_kernel", False):
        return frozenset()
    patch = _patch_function(model)
    if patch is None:
        return frozenset()
    config = getattr(args, "liger_kernel_config", None) or {}
    parameters = inspect.signature(patch).parameters

    def on(name: str) -> bool:
        return name in parameters and bool(config.get(name, parameters[name].default))

    replaced = {"forward"} if on(FORWARD) else set()
    return frozenset(replaced | ({"mlp"} if any(on(name) for name in MLP) else set()))
