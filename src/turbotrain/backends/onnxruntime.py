"""onnxruntime: the training step's graphs executed by ONNX Runtime, the engine ORTTrainer ran on.

ONNX Runtime's own training packages (onnxruntime-training, torch-ort, ORTModule) stopped at 1.19 and
do not run with current torch; this backend is built on maintained parts instead. torch.compile
(Dynamo + AOTAutograd) captures the step and splits it into a forward and a backward graph of ATen
ops; each is exported to ONNX by turbotrain's one exporter and run by an `onnxruntime.InferenceSession`
with ONNX Runtime's graph optimizations (see `ort_graph.py` for dropout, dynamic sizes, the disk cache,
the first-run check and the fallback). The optimizer step stays in torch (fused AdamW).

Options (`TurboTrainingArguments(backend="onnxruntime", backend_options={...})`):
    providers        ONNX Runtime execution providers, default by device (CUDA, ROCm, else CPU)
    cache_dir        where exported graphs are kept (default ~/.cache/turbotrain/onnxruntime; None: off)
    check_first_run  compare each graph's first outputs with eager (default True)
    session_options  attributes set on `onnxruntime.SessionOptions`, e.g. {"intra_op_num_threads": 2}
Exact: same loss and gradients as eager to float rounding (tests: BERT, RoBERTa with label sparsity,
GPT-2, Llama; 10 golden steps through TurboTrainer).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import TrainingArguments

from turbotrain.backends.base import Backend, BackendUnavailable
from turbotrain.backends.registry import register_backend
from turbotrain.utils.imports import is_available

DEFAULT_CACHE = Path.home() / ".cache" / "turbotrain" / "onnxruntime"
PROVIDERS_BY_DEVICE = {"cuda": ("CUDAExecutionProvider", "ROCMExecutionProvider", "MIGraphXExecutionProvider")}
OPTION_NAMES = {"providers", "cache_dir", "check_first_run", "session_options"}


def default_providers(device: torch.device, available: list[str]) -> tuple[str, ...]:
    preferred = [p for p in PROVIDERS_BY_DEVICE.get(torch.device(device).type, ()) if p in available]
    return (*preferred[:1], "CPUExecutionProvider")


def ort_config(args: TrainingArguments):
    """The backend's options from `args.backend_options`, checked, with defaults filled in."""
    import onnxruntime

    from turbotrain.backends.ort_graph import OrtConfig

    options = dict(getattr(args, "backend_options", None) or {})
    unknown = set(options) - OPTION_NAMES
    if unknown:
        raise ValueError(f"unknown onnxruntime backend options {sorted(unknown)}; valid: {sorted(OPTION_NAMES)}")
    available = onnxruntime.get_available_providers()
    providers = tuple(options.get("providers") or default_providers(args.device, available))
    missing = [p for p in providers if p not in available]
    if missing:
        raise BackendUnavailable(f"onnxruntime has no {missing} here (available: {available})")
    cache = options.get("cache_dir", DEFAULT_CACHE)
    return OrtConfig(providers, Path(cache) if cache is not None else None,
                     bool(options.get("check_first_run", True)), dict(options.get("session_options", {})))


def ort_compiler(config):
    """A Dynamo backend: AOTAutograd graphs (core ATen, math attention) -> ONNX Runtime sessions."""
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from turbotrain.backends.ort_graph import OrtGraph

    decompositions = dict(core_aten_decompositions())
    decompositions.pop(torch.ops.aten.native_dropout.default, None)  # drawn by torch, see ort_graph.py

    def forward(graph, example_inputs):
        return OrtGraph(graph, example_inputs, config, "forward")

    def backward(graph, example_inputs):
        return OrtGraph(graph, example_inputs, config, "backward")

    compiled = aot_autograd(fw_compiler=forward, bw_compiler=backward, decompositions=decompositions)

    def backend(graph_module, example_inputs):
        with sdpa_kernel(SDPBackend.MATH):  # the fused CPU attention kernels have no ONNX translation
            return compiled(graph_module, example_inputs)

    return backend


@register_backend
class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    description = "forward and backward graphs exported to ONNX and run by ONNX Runtime sessions"

    def check_available(self, args: TrainingArguments) -> None:
        for package in ("onnxruntime", "onnxscript", "onnx"):
            if not is_available(package):
                raise BackendUnavailable(f"backend='onnxruntime' needs the '{package}' package: "
                                         "pip install 'turbotrain[onnx]'")
        self.config = ort_config(args)

    def wrap_model(self, model: nn.Module) -> nn.Module:
        model.compile(backend=ort_compiler(self.config))
        return model

    def report(self) -> dict:
        from turbotrain.backends.ort_graph import STATS

        return {"exports": STATS.exports, "cache_hits": STATS.cache_hits, "export_s": round(STATS.export_seconds, 1),
                "fallbacks": list(STATS.fallbacks)}
