"""onnxruntime: the training step's graphs executed by ONNX Runtime, the engine ORTTrainer ran on.

ONNX Runtime's own training packages (onnxruntime-training, torch-ort, ORTModule) stopped at 1.19 and
do not run with current torch; this backend is built on maintained parts instead. torch.compile
(Dynamo + AOTAutograd) captures the step and splits it into a forward and a backward graph of ATen
ops; each is exported to ONNX by turbotrain's one exporter and run by an `onnxruntime.InferenceSession`
with ONNX Runtime's graph optimizations (see `ort_graph.py` for dropout, dynamic sizes, the disk cache,
the first-run check and the fallback). The optimizer step stays in torch (fused AdamW).

Options (`TurboTrainingArguments(backend="onnxruntime", backend_options={...})`, parsed into `OrtOptions`):
    providers        ONNX Runtime execution providers, default by device (CUDA EP for a CUDA model, else CPU)
    cache_dir        where exported graphs are kept (default: onnxruntime/ in turbotrain's cache, utils/cache.py,
                     so under $TURBOTRAIN_CACHE when it is set; None: off)
    check_first_run  compare each graph's first outputs with eager (default True)
    session_options  attributes set on `onnxruntime.SessionOptions`, e.g. {"intra_op_num_threads": 2}
Exact: same loss and gradients as eager to float rounding (tests: BERT, RoBERTa with label sparsity,
GPT-2, Llama; 10 golden steps through TurboTrainer; BART, Whisper through Seq2SeqTrainer, a diffusers
UNet, and 1-d/2-d convolutions with nearest upsampling, each with no graph falling back).
Devices (ort_binding.py): tensors are bound where they live, bf16 included; a CUDA model runs with
`CUDAExecutionProvider` (onnxruntime-gpu) on a stream of its own ordered with torch's on the device,
outputs written into torch tensors on the GPU, no host sync; with any other provider list (the CPU-only
onnxruntime wheel) it is refused with one message naming what to install. The CUDA path is exercised by scripts/gpu_check.py, not by CI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from transformers import TrainingArguments

from turbotrain.backends import ort_binding
from turbotrain.backends.backend_registry import register_backend
from turbotrain.backends.base import (
    EAGER_ONLY_CHUNKED_CE,
    Backend,
    BackendOptions,
    BackendUnavailable,
    refuse_trainer_compile,
)
from turbotrain.utils.cache import cache_root
from turbotrain.utils.imports import is_available

PROVIDERS_BY_DEVICE = {"cuda": (ort_binding.CUDA_PROVIDER,)}  # the providers that bind the device's memory


def default_providers(device: torch.device, available: list[str]) -> tuple[str, ...]:
    """The device's provider (CUDA EP for a CUDA model) where this onnxruntime has it, then the CPU's."""
    preferred = [p for p in PROVIDERS_BY_DEVICE.get(torch.device(device).type, ()) if p in available]
    return (*preferred[:1], "CPUExecutionProvider")


@dataclass(frozen=True)
class OrtOptions(BackendOptions):
    providers: tuple[str, ...] | None = None
    cache_dir: Path | None = field(default_factory=lambda: cache_root() / "onnxruntime")
    check_first_run: bool = True
    session_options: dict = field(default_factory=dict)

    @classmethod
    def normalize(cls, options: dict) -> dict:
        if options.get("providers") is not None:
            options["providers"] = tuple(options["providers"])
        if options.get("cache_dir") is not None:
            options["cache_dir"] = Path(options["cache_dir"])
        return options

    def validate(self) -> None:
        if not isinstance(self.check_first_run, bool):
            raise ValueError(f"check_first_run must be True or False, got {self.check_first_run!r}")
        if not isinstance(self.session_options, dict):
            raise ValueError(
                f"session_options must be a dict of SessionOptions attributes, got {self.session_options!r}"
            )


def ort_config(options: OrtOptions, device: torch.device):
    """The resolved configuration: providers chosen for `device` and checked against this onnxruntime.

    A model off the CPU needs a provider that binds its memory there (CUDA EP for CUDA); without one the
    backend is refused with what to install, never run with device pointers read as host memory."""
    import onnxruntime

    from turbotrain.backends.ort_graph import OrtConfig

    device = torch.device(device)
    available = onnxruntime.get_available_providers()
    providers = options.providers or default_providers(device, available)
    missing = [p for p in providers if p not in available]
    if missing:
        raise BackendUnavailable(f"onnxruntime has no {missing} here (available: {available})")
    ort_binding.check_device(device, tuple(providers))
    return OrtConfig(
        tuple(providers), options.cache_dir, options.check_first_run, dict(options.session_options), device.type
    )


def ort_compiler(config):
    """A Dynamo backend: AOTAutograd graphs (core ATen, math attention) -> ONNX Runtime sessions."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from turbotrain.backends.ort_graph import OrtGraph
    from turbotrain.boundaries.torch_boundary import aot_autograd
    from turbotrain.export.conv_backward import training_decompositions

    decompositions = training_decompositions()  # core ATen; convolution backward: conv_backward.py
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
    turns_off = {"chunked_cross_entropy": EAGER_ONLY_CHUNKED_CE}
    options_class = OrtOptions

    def check_available(self, args: TrainingArguments) -> None:
        refuse_trainer_compile(self.name, args)
        for package in ("onnxruntime", "onnxscript", "onnx"):
            if not is_available(package):
                raise BackendUnavailable(
                    f"backend='onnxruntime' needs the '{package}' package: pip install 'turbotrain[onnx]'"
                )
        self.config = ort_config(self.options, args.device)

    def wrap_model(self, model: nn.Module) -> nn.Module:
        model.compile(backend=ort_compiler(self.config))
        return model

    def report(self) -> dict:
        from turbotrain.backends.ort_graph import STATS

        return {
            "exports": STATS.exports,
            "cache_hits": STATS.cache_hits,
            "export_s": round(STATS.export_seconds, 1),
            "fallbacks": list(STATS.fallbacks),
        }
