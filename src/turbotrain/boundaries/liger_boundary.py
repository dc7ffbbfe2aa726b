"""The boundary with Liger-Kernel's names: what its per-instance patch (Trainer's `use_liger_kernel=True`) will
replace in a model, read from its table of patch functions. No policy here: the passes decide what to do about it.

Trainer (and every TRL trainer) with `use_liger_kernel=True` hands the model to Liger's
`_apply_liger_kernel_to_instance(model, **liger_kernel_config)` (Transformers 5.0 in `__init__`, later releases at
the start of `train()`), which looks the model's `config.model_type` up in `MODEL_TYPE_TO_APPLY_LIGER_FN` (a private
name of `liger_kernel.transformers.monkey_patch`, pinned by tests/test_trainer_liger.py where it is installed) and calls that
function with the config's keywords it takes, each defaulting as the function's signature says (Liger 0.8.2):
* `fused_linear_cross_entropy` (default on for the decoders): the model's forward becomes Liger's, which hands the
  hidden states and the head's weight to its fused loss in training and never calls the head module;
* `swiglu` / `geglu`: each gated MLP's forward becomes Liger's (bound on the instance);
* `rms_norm`, `rope`, `layer_norm`: norms' forwards and the module's rotary function; no turbotrain pass touches
  those.

Where Liger has already patched the instance (Transformers 5.0 applies it in `Trainer.__init__`, before a TRL
trainer turns its fused loss off in its own), what it bound is read from the instance: a forward whose function
is Liger's. A Liger release without the table reads as replacing everything. Without liger-kernel nothing is
patched here (Trainer raises its own ImportError naming the package), and a model type Liger does not know is left
as it is (Liger logs so).
"""

from __future__ import annotations

import importlib.util
import inspect

FORWARD = "fused_linear_cross_entropy"  # the model's forward: Liger's head and loss
MLP = ("swiglu", "geglu")  # each gated MLP's forward
LIGER_TABLE = "MODEL_TYPE_TO_APPLY_LIGER_FN"
EVERYTHING = frozenset({"forward", "mlp"})


def _liger_table():
    """Liger's table of patch functions; None without liger-kernel; `EVERYTHING` where a release renamed it (read
    as replacing all it can: a pass that steps aside for nothing would meet Liger's forward)."""
    if importlib.util.find_spec("liger_kernel") is None:
        return None
    from liger_kernel.transformers import monkey_patch

    return getattr(monkey_patch, LIGER_TABLE, EVERYTHING)


def _base(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _from_liger(method) -> bool:
    return str(getattr(getattr(method, "__func__", method), "__module__", "")).startswith("liger_kernel")


def already_replaced(model) -> frozenset[str]:
    """What Liger has already bound on `model`'s instances (Transformers 5.0 patches in Trainer's `__init__`,
    before a TRL trainer turns Liger's fused loss off in its own)."""
    base = _base(model)
    forward = {"forward"} if _from_liger(vars(base).get("forward")) else set()
    mlps = any(_from_liger(vars(module).get("forward")) for module in base.modules() if module is not base)
    return frozenset(forward | ({"mlp"} if mlps else set()))


def liger_replaces(model, args) -> frozenset[str]:
    """What `use_liger_kernel=True` in `args` will have Liger replace in `model` (a PEFT wrapper reads its base
    model's config), or has already replaced: "forward" (its fused head and loss), "mlp" (its gated MLP); empty
    where it replaces neither."""
    if not getattr(args, "use_liger_kernel", False) or model is None:
        return frozenset()
    table = _liger_table()
    if table is None:
        return frozenset()
    if table is EVERYTHING:
        return EVERYTHING
    patch = table.get(getattr(getattr(model, "config", None), "model_type", None))
    if patch is None:
        return already_replaced(model)
    config = getattr(args, "liger_kernel_config", None) or {}
    parameters = inspect.signature(patch).parameters

    def on(name: str) -> bool:
        return name in parameters and bool(config.get(name, parameters[name].default))

    replaced = {"forward"} if on(FORWARD) else set()
    return frozenset(replaced | ({"mlp"} if any(on(name) for name in MLP) else set()) | already_replaced(model))
