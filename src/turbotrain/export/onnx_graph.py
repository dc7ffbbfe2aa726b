"""The one exporter: a torch module, or an ATen graph traced from any function, -> an ONNX model.

Both the deployment export (`deploy.py`), the on-device training artifacts (`training.py`) and the
onnxruntime training backend go through `export_module`, which runs torch's own ONNX exporter
(`torch.onnx.export(dynamo=True)`: torch.export, core-ATen decompositions, onnxscript translation and
its graph optimizer). Contract:

- every exported module takes its inputs positionally, `forward(*inputs)`, and returns a tensor or a
  tuple of tensors; inputs and outputs get the names given;
- `dynamic_axes` maps an input name to {axis: dimension name}; axes that share a name share one
  symbolic dimension (batch, sequence), so one ONNX file serves every batch and length;
- tensors a module holds as parameters or buffers become ONNX initializers (constants of the graph).

`trace_aten` turns a function (a forward plus `torch.autograd.grad`, say) into an FX graph of core ATen
ops with symbolic shapes, which `GraphModule` then wraps for export. Attention is traced through
PyTorch's math kernel: the fused CPU flash-attention ops and their backward have no ONNX translation;
convolution backward is traced as a transposed convolution and a matmul (`conv_backward.py`).
Exact: the exported graph computes what torch computes, to float rounding (checked by `verify.py`
and by the tests for every task and graph).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from turbotrain.utils.imports import require

# Protobuf cannot hold more than 2 GB in one message; above this, weights go to a side file.
EXTERNAL_DATA_BYTES = 1 << 30
DEFAULT_MAX_SEQUENCE = 4096


class ExportError(RuntimeError):
    """torch's ONNX exporter could not export a graph; `op` names the ATen op it stopped at, if known."""

    def __init__(self, message: str, op: str | None = None):
        super().__init__(message)
        self.op = op


def failed_op(error: BaseException) -> str | None:
    """The ATen op named in an exporter error ('aten::foo.default'), if the message names one."""
    text = str(error)
    match = re.search(r"OpOverload\(op='([\w.:]+)', overload='(\w+)'\)", text)
    if match:
        return f"{match.group(1)}.{match.group(2)}"
    match = re.search(r"(aten[.:]{1,2}\w+(?:\.\w+)?)", text)
    return match.group(1) if match else None


def _dimensions(dynamic_axes: dict[str, dict[int, str]], max_sizes: dict[str, int]) -> dict[str, object]:
    names = {name for axes in dynamic_axes.values() for name in axes.values()}
    return {name: torch.export.Dim(name, min=1, max=max_sizes.get(name, DEFAULT_MAX_SEQUENCE)) for name in names}


def _dynamic_shapes(input_names: Sequence[str], dynamic_axes: dict[str, dict[int, str]], max_sizes: dict[str, int]):
    if not dynamic_axes:
        return None
    dims = _dimensions(dynamic_axes, max_sizes)
    per_input = tuple({axis: dims[name] for axis, name in dynamic_axes.get(n, {}).items()} or None for n in input_names)
    return {"inputs": per_input}


@contextlib.contextmanager
def quiet_exporter():
    """torch.onnx prints progress lines and warns per skipped torchvision op; keep the console clean."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch._dynamo", "torch.export", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def export_module(
    module: torch.nn.Module,
    inputs: Sequence[torch.Tensor],
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_axes: dict[str, dict[int, str]] | None = None,
    max_sizes: dict[str, int] | None = None,
    optimize: bool = False,
    dynamic_shapes=None,
):
    """Export `module(*inputs)` to an `onnx.ModelProto` (see the module docstring for the contract).

    `optimize` runs onnxscript's graph rewriter; off by default because its `x + 0 -> x` rule matches
    constants up to 1e-8 in magnitude and so deleted AdamW's `+ eps` (found by the on-device test).
    ONNX Runtime optimizes every graph again when it opens a session. `dynamic_shapes`, if given, is
    passed to torch.export as is (`{"inputs": (per-input dict or None, ...)}`) instead of `dynamic_axes`.
    """
    require("onnxscript", "ONNX export")
    require("onnx", "ONNX export")
    if dynamic_shapes is None:
        dynamic_shapes = _dynamic_shapes(input_names, dynamic_axes or {}, max_sizes or {})
    try:
        with quiet_exporter():
            program = torch.onnx.export(
                module,
                tuple(inputs),
                dynamo=True,
                dynamic_shapes=dynamic_shapes,
                input_names=list(input_names),
                output_names=list(output_names),
                optimize=optimize,
                verbose=False,
                report=False,
            )
    except Exception as error:  # the exporter raises several private error types
        op = failed_op(error)
        summary = str(error).split("## Exception summary")[-1].strip().splitlines()
        detail = next((line for line in summary if line.strip()), type(error).__name__)
        raise ExportError(f"ONNX export failed{f' at {op}' if op else ''}: {detail[:500]}", op) from error
    return program.model_proto


def trace_aten(fn: Callable, inputs: Sequence[torch.Tensor]) -> torch.fx.GraphModule:
    """`fn(*inputs)` as an FX graph of core ATen ops with symbolic shapes (autograd calls traced through)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from turbotrain.boundaries.torch_boundary import no_duck_shapes
    from turbotrain.export.conv_backward import training_decompositions

    # No duck shapes: a batch of 2 must not become the same symbol as a 2-label head's weight rows.
    with sdpa_kernel(SDPBackend.MATH), no_duck_shapes(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_fx(fn, tracing_mode="symbolic", decomposition_table=training_decompositions())(*inputs)


def initializer_name(name: str) -> str:
    """A parameter name usable as a buffer name (and so as an ONNX initializer name)."""
    return re.sub(r"\W", "_", name)


class GraphModule(torch.nn.Module):
    """Wraps a traced graph `graph(*inputs, *constants)` so the constants become ONNX initializers."""

    def __init__(self, graph: torch.fx.GraphModule, constants: dict[str, torch.Tensor]):
        super().__init__()
        self.graph_module = graph
        self.constant_names = [initializer_name(n) for n in constants]
        for name, tensor in zip(self.constant_names, constants.values()):
            self.register_buffer(name, tensor.detach(), persistent=False)

    def forward(self, *inputs):
        return self.graph_module(*inputs, *(getattr(self, n) for n in self.constant_names))


def save_onnx(model_proto, path: str | Path) -> Path:
    """Save, moving weights to `<name>.data` beside it when the model is too big for one protobuf."""
    import onnx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    external = model_proto.ByteSize() > EXTERNAL_DATA_BYTES
    onnx.save_model(
        model_proto,
        str(path),
        save_as_external_data=external,
        all_tensors_to_one_file=True,
        location=f"{path.name}.data" if external else None,
    )
    return path
