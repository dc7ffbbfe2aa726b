"""inductor: torch.compile with the Inductor compiler, applied in place to the model.

`wrap_model` calls `model.compile(...)`, so the model object the Trainer holds, saves and wraps (DDP,
FSDP) stays the same object; turbotrain's passes are module hooks, which Dynamo traces with the model.

Exact: Inductor normally draws dropout masks with its own random-number kernel, a different stream
from eager's, so losses would drift from stock by ~1e-3 at the first step. This backend compiles with
`fallback_random=True`, scoped to its own graphs (Inductor's `config_patches`, not the global config),
so dropout draws the same masks as eager and losses match stock to ~1e-7 in fp32.

Shapes: label sparsity's kept-row count and padding-free's packed rows change every step. After the
first recompile per dimension Dynamo marks it dynamic, and nothing else specializes: Inductor's split
reductions are off in these graphs, since deciding a split guards on the token count (R x C), which
recompiled every step with packing (measured: 12 compiles in 8 steps before, none after step 3 now).
Cost: tens of seconds of compilation per graph on a 2-core CPU, where it also measured slower than
eager for training; `auto` therefore picks it on CUDA only.
"""

from __future__ import annotations

import shutil

import torch
from torch import nn
from transformers import TrainingArguments

from turbotrain.backends.base import EAGER_ONLY_CHUNKED_CE, Backend, BackendUnavailable
from turbotrain.backends.registry import register_backend

EXACT_PATCHES = {"fallback_random": True, "split_reductions": False}


def exact_inductor(graph_module: torch.fx.GraphModule, example_inputs):
    """A Dynamo backend: Inductor with dropout drawn from eager's random stream."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(graph_module, example_inputs, config_patches=dict(EXACT_PATCHES))


@register_backend
class InductorBackend(Backend):
    name = "inductor"
    turns_off = {"chunked_cross_entropy": EAGER_ONLY_CHUNKED_CE}
    description = "torch.compile with the Inductor compiler (eager-identical dropout)"

    def check_available(self, args: TrainingArguments) -> None:
        if args.device.type == "cpu" and shutil.which("g++") is None and shutil.which("c++") is None:
            raise BackendUnavailable("backend='inductor' on CPU needs a C++ compiler (g++) on PATH")

    def wrap_model(self, model: nn.Module) -> nn.Module:
        model.compile(backend=exact_inductor)
        return model
