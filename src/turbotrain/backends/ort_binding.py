"""Where ONNX Runtime reads and writes a graph's tensors: on the tensors' own device, in their own dtype.

* inputs are bound where they live (`location(tensor)`: "cpu" or "cuda" and the device index), by pointer,
  no copy; bf16 goes by its ONNX type number (`element_type`: numpy has no bf16);
* outputs: on the CPU with only numpy dtypes, ONNX Runtime allocates them and they are copied out once
  (measured faster there than binding torch tensors, benchmarks/); anywhere else (a CUDA graph, or a bf16
  output) torch allocates each output at the size the traced graph gives it for this call's input sizes and
  ONNX Runtime writes into it (`preallocates`): nothing crosses to the host;
* CUDA: a session runs on a torch stream of its own, handed to CUDA EP as its `user_compute_stream`
  (`provider_options`; not torch's current stream, which is usually the legacy default stream, handle 0,
  which ONNX Runtime takes for "none" and replaces with a stream of its own), ordered with torch's work by
  stream waits on the device (`OrtStream`: the session's stream waits for torch's before a run, torch's for
  the session's after it), with the end-of-run stream synchronization off (`run_options`): the step never
  waits on the host. Only `CUDAExecutionProvider` binds CUDA memory; a CUDA model with any other provider
  list is refused in `check_device` (CUDA pointers bound as host memory would be read as garbage), with
  what to install.
Verified on the CPU (the preallocated path too, tests/backends/test_ort_binding.py); the CUDA path needs an
onnxruntime-gpu build and is exercised by scripts/gpu_check.py (docs/gpu.md says what is unverified).
"""

from __future__ import annotations

import numpy as np
import torch

from turbotrain.backends.base import BackendUnavailable

CUDA_PROVIDER = "CUDAExecutionProvider"
ONNX_BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16
NUMPY_TYPES = {
    torch.float32: np.float32,
    torch.float16: np.float16,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.bool: np.bool_,
    torch.float64: np.float64,
    torch.uint8: np.uint8,
    torch.int8: np.int8,
}
ONNX_TYPES = {torch.bfloat16: ONNX_BFLOAT16}


def element_type(dtype: torch.dtype):
    """What `IOBinding.bind_input/bind_output` take for `dtype`: a numpy type, or an ONNX type number (bf16)."""
    if dtype in NUMPY_TYPES:
        return NUMPY_TYPES[dtype]
    if dtype in ONNX_TYPES:
        return ONNX_TYPES[dtype]
    raise TypeError(f"ONNX Runtime binding has no element type for {dtype}")


def location(tensor: torch.Tensor) -> tuple[str, int]:
    """(device type, device index) to bind `tensor`'s memory at."""
    return tensor.device.type, tensor.device.index or 0


def preallocates(device_type: str, output_dtypes: list[torch.dtype]) -> bool:
    """Whether torch allocates the outputs (everything but a CPU graph of numpy dtypes; module docstring)."""
    return device_type != "cpu" or any(dtype not in NUMPY_TYPES for dtype in output_dtypes)


def check_device(device: torch.device, providers: tuple[str, ...]) -> None:
    """Refuse providers that cannot read the model's memory where it lives (module docstring)."""
    device = torch.device(device)
    if device.type == "cpu":
        return
    if device.type != "cuda" or CUDA_PROVIDER not in providers:
        raise BackendUnavailable(
            f"backend 'onnxruntime': the model is on {device.type}, but the providers {list(providers)} cannot "
            f"read {device.type} memory; on NVIDIA GPUs install onnxruntime-gpu (which brings {CUDA_PROVIDER}) "
            "in place of onnxruntime, or train on the CPU, or choose backend='inductor'"
        )


def require_providers_loaded(session, providers: tuple[str, ...]) -> None:
    """Refuse a session whose CUDA provider did not load (missing cuDNN or cuBLAS libraries: ONNX Runtime logs the
    error and makes a CPU-only session, whose device pointers would fail at run time with an unclear message)."""
    loaded = session.get_providers()
    if CUDA_PROVIDER in providers and CUDA_PROVIDER not in loaded:
        raise BackendUnavailable(
            f"backend 'onnxruntime': ONNX Runtime could not load {CUDA_PROVIDER} (the session has {loaded}); "
            "its CUDA libraries (cuDNN, cuBLAS) must match onnxruntime-gpu's build: see ONNX Runtime's log above"
        )


def provider_options(providers: tuple[str, ...], stream: OrtStream | None) -> list[dict]:
    """One options dict per provider: CUDA EP on the stream's device and stream, arena grown as asked."""
    options = []
    for provider in providers:
        if provider == CUDA_PROVIDER and stream is not None:
            options.append(
                {
                    "device_id": str(stream.device_index),
                    "user_compute_stream": str(stream.handle),
                    "arena_extend_strategy": "kSameAsRequested",  # not the next power of two beside torch's allocator
                    # ONNX Runtime's CUDA EP defaults TF32 on; torch's matmuls default it off: fp32 graphs follow
                    # torch's setting, or they differ from eager by TF32's rounding (~1e-3) and fall back
                    "use_tf32": str(int(torch.backends.cuda.matmul.allow_tf32)),
                }
            )
        else:
            options.append({})
    return options


class OrtStream:
    """The CUDA stream one session runs on, ordered with torch's current stream on the device, no host sync."""

    def __init__(self, device_index: int | None = None):
        self.device_index = torch.cuda.current_device() if device_index is None else device_index
        self.stream = torch.cuda.Stream(self.device_index)  # a real stream: its handle is never 0
        self.handle = self.stream.cuda_stream

    def before_run(self, inputs: list[torch.Tensor]) -> None:
        """The session's stream waits for what torch queued (the inputs' writers); inputs stay allocated for it."""
        self.stream.wait_stream(torch.cuda.current_stream(self.device_index))
        for tensor in inputs:
            if tensor.is_cuda:
                tensor.record_stream(self.stream)

    def after_run(self) -> None:
        """torch's stream waits for the session's kernels before it reads their outputs."""
        torch.cuda.current_stream(self.device_index).wait_stream(self.stream)


def run_options(device_type: str):
    """Run options: on CUDA no stream synchronization at the end of a run (the stream is torch's)."""
    import onnxruntime

    options = onnxruntime.RunOptions()
    if device_type != "cpu":
        options.add_run_config_entry("disable_synchronize_execution_providers", "1")
    return options
