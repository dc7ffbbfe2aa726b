"""The gated MLPs of decoder models: `down_proj(act_fn(gate_proj(x)) * up_proj(x))`.

Llama, Mistral, Qwen2/Qwen3, Gemma 1/2/3, OLMo, Granite and most decoders since write their MLP as that one
line, with the projections as children named `gate_proj`, `up_proj`, `down_proj` (plain `nn.Linear`s or PEFT
LoRA layers over them) and the activation as `act_fn`. `gated_mlps(model)` finds them by that layout:
every module with those four children whose activation keeps only its input for its backward
(`keeps_only_its_input`: SiLU, erf GELU and tanh GELU as one kernel), which is what a pass that recomputes
the activation's output in the backward relies on (passes/lean_gated_mlp.py). The layout says nothing of
the module's `forward`: the pass compares its rewrite with the module's own forward per class before
installing (a fused `gate_up_proj`, Phi-3's, has another layout and is not found here).

Found through the module tree; never runs the model.
"""

from __future__ import annotations

import functools

import torch.nn.functional as F
from torch import nn

GATED_MLP_CHILDREN = ("gate_proj", "up_proj", "down_proj", "act_fn")
_KERNEL_ACTIVATIONS = {  # class name -> the one kernel its `forward` runs (Transformers' activations.py)
    "SiLUActivation": None,  # forward is F.silu itself
    "SiLU": None,  # torch.nn.SiLU
    "GELU": None,  # torch.nn.GELU (either approximation: one kernel)
    "FusedGELUTanh": None,  # turbotrain's fused_activation
    "GELUActivation": F.gelu,  # self.act: F.gelu, or a Python formula (use_gelu_python) that saves more
    "GELUTanh": F.gelu,  # self.act: partial(F.gelu, approximate="tanh"), or a Python formula
    "PytorchGELUTanh": F.gelu,  # Transformers 5.0's name of GELUTanh
}


def keeps_only_its_input(activation: nn.Module) -> bool:
    """Whether `activation` runs one elementwise kernel that keeps its input (and nothing else) for the backward:
    torch's SiLU and GELU; Transformers' GELU classes only when they call `F.gelu`, not their Python formulas."""
    name = type(activation).__name__
    if name not in _KERNEL_ACTIVATIONS:
        return False
    kernel = _KERNEL_ACTIVATIONS[name]
    if kernel is None:
        return True
    inner = getattr(activation, "act", None)
    return inner is kernel or (isinstance(inner, functools.partial) and inner.func is kernel)


def gated_mlps(model: nn.Module) -> list[nn.Module]:
    """Every module laid out as a gated MLP (`GATED_MLP_CHILDREN`) whose activation keeps only its input."""
    return [module for module in model.modules() if _is_gated_mlp(module)]


def _is_gated_mlp(module: nn.Module) -> bool:
    children = [getattr(module, name, None) for name in GATED_MLP_CHILDREN]
    return all(isinstance(child, nn.Module) for child in children) and keeps_only_its_input(children[-1])
