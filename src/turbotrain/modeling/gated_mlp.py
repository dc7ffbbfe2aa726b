"""The gated MLPs of decoder models: `down_proj(act_fn(gate_proj(x)) * up_proj(x))`.

Llama, Mistral, Qwen2/Qwen3, Gemma 1/2/3, OLMo, Granite and most decoders since write their MLP as that one
line, with the projections as children named `gate_proj`, `up_proj`, `down_proj` (plain `nn.Linear`s or PEFT
LoRA layers over them) and the activation as `act_fn`. `gated_mlps(model)` finds them: every module with those
four children whose class's `forward` is that one line (read from its source, `plain_gated_forward`: a dropout,
a clamp, a scale or a cast anywhere in it, as some MLPs with the same children have, and it is not found), that
no per-instance `forward` replaces (another library's patch), and whose activation keeps only its input for its
backward (`keeps_only_its_input`: SiLU, erf GELU and tanh GELU as one kernel, not in place), which is what a
pass that recomputes the activation's output in the backward relies on (passes/lean_gated_mlp.py). A fused
`gate_up_proj` (Phi-3's) is another layout and is not found here.

Found through the module tree; never runs the model.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap

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
    if name not in _KERNEL_ACTIVATIONS or getattr(activation, "inplace", False):  # in place: gate is overwritten
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
    if not all(isinstance(child, nn.Module) for child in children) or not keeps_only_its_input(children[-1]):
        return False
    return "forward" not in module.__dict__ and plain_gated_forward(type(module))


@functools.cache
def plain_gated_forward(cls: type) -> bool:
    """Whether `cls.forward(self, x)` is exactly `return self.down_proj(self.act_fn(self.gate_proj(x)) *
    self.up_proj(x))`, or that value assigned to one name and returned (Transformers' form), by its source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    except (OSError, TypeError, SyntaxError):  # no source (built at run time, compiled): not known to be plain
        return False
    function = tree.body[0]
    if not isinstance(function, ast.FunctionDef) or function.decorator_list or not _one_input(function.args):
        return False
    x = function.args.args[1].arg
    expected = ast.dump(
        ast.parse(f"self.down_proj(self.act_fn(self.gate_proj({x})) * self.up_proj({x}))").body[0].value
    )
    body = [stmt for stmt in function.body if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return ast.dump(body[0].value) == expected
    if len(body) == 2 and isinstance(body[0], ast.Assign) and isinstance(body[1], ast.Return):
        targets, returned = body[0].targets, body[1].value
        named = len(targets) == 1 and isinstance(targets[0], ast.Name)
        same = named and isinstance(returned, ast.Name) and returned.id == targets[0].id
        return same and ast.dump(body[0].value) == expected
    return False


def _one_input(arguments: ast.arguments) -> bool:
    extra = arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.posonlyargs or arguments.defaults
    return len(arguments.args) == 2 and not extra
