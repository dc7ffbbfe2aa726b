"""inductor: torch.compile with the Inductor compiler, through Trainer's own `torch_compile` path.

Trainer (via Accelerate) wraps the model in `torch.compile` when it is prepared; the turbotrain passes
are module hooks, so Dynamo traces them with the model. Label sparsity gives a kept-row count that
changes every step: after the first recompile Dynamo marks that size dynamic, so it compiles twice,
not once per batch. Exact up to the reordering of float operations that fusion brings (fp32 ~1e-6).
Compilation costs tens of seconds per graph on a 2-core CPU; on such CPUs it measured slower than
eager for training, which is why `auto` picks it on CUDA only.
"""

from __future__ import annotations

import shutil

import torch
from transformers import TrainingArguments

from turbotrain.backends.base import Backend, BackendUnavailable
from turbotrain.backends.registry import register_backend


@register_backend
class InductorBackend(Backend):
    name = "inductor"
    description = "torch.compile with the Inductor compiler"

    def check_available(self, args: TrainingArguments) -> None:
        if args.device.type == "cpu" and shutil.which("g++") is None and shutil.which("c++") is None:
            raise BackendUnavailable("backend='inductor' on CPU needs a C++ compiler (g++) on PATH")
        if not hasattr(torch, "compile"):
            raise BackendUnavailable("backend='inductor' needs torch>=2.0")

    def configure(self, args: TrainingArguments) -> None:
        args.torch_compile = True
        args.torch_compile_backend = "inductor"
