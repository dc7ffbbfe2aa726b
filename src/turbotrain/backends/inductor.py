"""inductor: torch.compile with the Inductor compiler, applied in place to the model or to its blocks.

`wrap_model` calls `module.compile(...)`, so the model object the Trainer holds, saves and wraps (DDP,
FSDP) stays the same object; turbotrain's passes are module hooks, which Dynamo traces with the model.

Scope (`backend_options={"scope": ...}`, `InductorOptions`):
* "model" (default): the whole model's call, hooks and head included, is one compiled region.
* "blocks" (regional compilation): only the repeated layers (`modeling.repeated_blocks`: GPT-2's `h`,
  BERT's `encoder.layer`, ...) are compiled, each in place; identical blocks share one compiled graph
  (Dynamo inlines the module and takes its parameters as inputs), so compilation costs about one
  block, and the embeddings, the head and the loss (with label sparsity's hooks) stay eager. A model
  without repeated blocks is compiled whole, with a warning.

Exact: Inductor normally draws dropout masks with its own random-number kernel, a different stream
from eager's, so losses would drift from stock by ~1e-3 at the first step. This backend compiles with
`fallback_random=True`, scoped to its own graphs (Inductor's `config_patches`, not the global config),
so dropout draws the same masks as eager and losses match stock to ~1e-7 in fp32.

Shapes: label sparsity's kept-row count and padding-free's packed rows change every step. After the
first recompile per dimension Dynamo marks it dynamic, and nothing else specializes: Inductor's split
reductions are off in these graphs, since deciding a split guards on the token count (R x C), which
recompiled every step with packing (measured: 12 compiles in 8 steps before, none after step 3 now).
Label sparsity hands its rows to the head through a module global, not through the head module: Dynamo
keeps every tensor reached through a builtin module (an `nn.Linear` head) static-shaped, and the model
recompiled on every step when labels varied (Whisper, GPT-2; tests/passes/test_label_sparsity_compiled.py).
Cost: tens of seconds of compilation per graph on a 2-core CPU. `auto` (auto.py) measures it against
eager on the run's own steps.

`unwrap_model` takes the compilation off again (used by `auto` when eager measured faster).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import torch
from torch import nn
from transformers import TrainingArguments

from turbotrain.backends.backend_registry import register_backend
from turbotrain.backends.base import (
    EAGER_ONLY_CHUNKED_CE,
    Backend,
    BackendOptions,
    BackendUnavailable,
    refuse_trainer_compile,
)
from turbotrain.boundaries import torch_boundary
from turbotrain.modeling import repeated_blocks
from turbotrain.utils.warnings import warn_once

EXACT_PATCHES = {"fallback_random": True, "split_reductions": False}
SCOPES = ("model", "blocks")


def exact_inductor(graph_module: torch.fx.GraphModule, example_inputs):
    """A Dynamo backend: Inductor with dropout drawn from eager's random stream."""
    return torch_boundary.inductor_compile(graph_module, example_inputs, EXACT_PATCHES)


@dataclass(frozen=True)
class InductorOptions(BackendOptions):
    scope: str = "model"

    def validate(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {self.scope!r}")


def compile_regions(model: nn.Module, scope: str) -> list[nn.Module]:
    """Compile `model` (scope "model") or its repeated blocks ("blocks") in place; the modules compiled."""
    regions = repeated_blocks(model) if scope == "blocks" else [model]
    if not regions:
        warn_once(f"turbotrain inductor: {type(model).__name__} has no repeated blocks; compiling the whole model")
        regions = [model]
    for region in regions:
        region.compile(backend=exact_inductor)
    return regions


def uncompile(modules: list[nn.Module]) -> None:
    """Undo `nn.Module.compile` on each module (None = eager: torch_boundary.uncompile)."""
    for module in modules:
        torch_boundary.uncompile(module)


@register_backend
class InductorBackend(Backend):
    name = "inductor"
    turns_off = {"chunked_cross_entropy": EAGER_ONLY_CHUNKED_CE}
    options_class = InductorOptions

    def __init__(self, options: InductorOptions | None = None):
        super().__init__(options)
        self.compiled: list[nn.Module] = []

    def check_available(self, args: TrainingArguments) -> None:
        refuse_trainer_compile(self.name, args)
        if args.device.type == "cpu" and shutil.which("g++") is None and shutil.which("c++") is None:
            raise BackendUnavailable("backend='inductor' on CPU needs a C++ compiler (g++) on PATH")
        if args.device.type == "cuda" and not torch_boundary.has_triton():  # else the first compiled step raises
            raise BackendUnavailable("backend='inductor' on CUDA needs Triton (pip install triton, matching torch)")

    def wrap_model(self, model: nn.Module) -> nn.Module:
        self.compiled = compile_regions(model, self.options.scope)
        return model

    def unwrap_model(self, model: nn.Module) -> nn.Module:
        uncompile(self.compiled)
        self.compiled = []
        return model

    def summary(self) -> str:
        return f"inductor ({'regional: repeated blocks' if self.options.scope == 'blocks' else 'whole model'})"
