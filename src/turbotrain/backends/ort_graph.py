"""One AOTAutograd graph (a forward or a backward of ATen ops) executed by an ONNX Runtime session.

Life of a graph, on its first call with real tensors:
1. dropout: each `aten.native_dropout` becomes a mask input; the runner draws the mask with torch's
   own `native_dropout` (same generator, same order as eager), so dropout is eager's, bit for bit;
2. symbolic sizes: integer inputs of the graph (Dynamo's dynamic sizes) are read off the tensor
   dimensions that carry the same symbol; axes that are symbolic stay dynamic in the ONNX graph, so
   one export serves every kept-row count and packed length;
3. export through turbotrain's one exporter (`export/onnx_graph.py`), or load it from the disk cache
   (key: the graph's code and input metadata, torch/onnxruntime/onnxscript versions, providers);
4. the session's outputs are compared once with the graph run eagerly on the same inputs (relative
   1e-4 of each output's scale); a graph that fails to export, to load in ONNX Runtime, fails this
   check or later fails to run falls back to eager with one warning naming the reason, never silently.
Steady state: inputs bound by name without copies (IOBinding on the torch tensors' memory, on their
device: ort_binding.py); on the CPU outputs copied once out of ONNX Runtime (one memcpy per output), on
CUDA (or for bf16 outputs) written by ONNX Runtime into tensors torch allocated at the traced sizes; then
laid out with the strides the rest of the AOTAutograd graph expects; an input the graph returns unchanged
is returned as is. On CUDA the session runs on a stream of its own, ordered with torch's on the device
without a host sync (ort_binding.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.fx import GraphModule

from turbotrain.backends import ort_binding
from turbotrain.backends.ort_rewrites import broadcast_copies, constants_as_buffers, masks_for_dropout
from turbotrain.export.graph_rewrites import scatter_add_for_index_put
from turbotrain.export.onnx_graph import ExportError, export_module, save_onnx
from turbotrain.utils.warnings import warn_once

CHECK_RTOL, CHECK_ATOL = 1e-4, 1e-6  # first-run check: |ort - eager| <= rtol * max|eager| + atol (fp32)
HALF_CHECK_RTOL = 2e-2  # bf16/fp16 outputs: a few of their rounding steps (2^-8 for bf16) of the largest value


@dataclass
class Stats:
    """Counters for tests and the benchmark: what happened to the graphs of this process."""

    exports: int = 0
    cache_hits: int = 0
    fallbacks: list[str] = field(default_factory=list)
    export_seconds: float = 0.0


STATS = Stats()


@dataclass(frozen=True)
class OrtConfig:
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    cache_dir: Path | None = None
    check_first_run: bool = True
    session_options: dict = field(default_factory=dict)
    device_type: str = "cpu"  # where the model's tensors live: what the session binds (ort_binding.py)


def _is_symbolic(value) -> bool:
    return (
        isinstance(value, torch.SymInt)
        and not isinstance(value.node.expr, int)
        and not getattr(value.node.expr, "is_number", False)
    )


class TensorInputs(torch.nn.Module):
    """`graph(*args)` with only tensor inputs and outputs: integer inputs are computed from tensor sizes."""

    def __init__(
        self, graph: GraphModule, int_exprs: dict, symbols: dict, tensor_positions: list[int], tensor_outputs: list[int]
    ):
        super().__init__()
        import sympy

        self.inner = graph  # not `graph`: that name is the fx Graph on the GraphModule torch.export builds
        self.tensor_positions, self.tensor_outputs = tensor_positions, tensor_outputs
        self.symbols = list(symbols.items())
        names = [sym for sym, _ in self.symbols]
        self.int_functions = {p: sympy.lambdify(names, expr, modules="math") for p, expr in int_exprs.items()}

    def forward(self, *inputs):
        args: list = [None] * (len(self.tensor_positions) + len(self.int_functions))
        for tensor, position in zip(inputs, self.tensor_positions):
            args[position] = tensor
        sizes = [inputs[t].shape[d] for _, (t, d) in self.symbols]
        for position, function in self.int_functions.items():
            args[position] = function(*sizes)
        outputs = self.inner(*args)
        return tuple(outputs[i] for i in self.tensor_outputs)


class OrtGraph:
    """Callable that runs an AOTAutograd graph in ONNX Runtime (see the module docstring)."""

    def __init__(self, graph: GraphModule, example_inputs: Sequence, config: OrtConfig, kind: str):
        self.kind, self.config = kind, config
        self.graph = graph
        constants_as_buffers(graph)
        broadcast_copies(graph)
        self.masks = masks_for_dropout(graph)
        self.unsupported = scatter_add_for_index_put(graph)
        self.placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
        values = [n.meta.get("val") for n in self.placeholders]
        self.int_positions = [i for i, v in enumerate(values) if isinstance(v, (int, torch.SymInt))]
        self.tensor_positions = [i for i, v in enumerate(values) if i not in set(self.int_positions)]
        output_node = next(n for n in graph.graph.nodes if n.op == "output")
        out_values = [getattr(a, "meta", {}).get("val") if a is not None else None for a in output_node.args[0]]
        self.out_values = out_values
        self.output_names = [getattr(a, "name", str(a)) for a in output_node.args[0]]
        self.tensor_outputs = [i for i, v in enumerate(out_values) if isinstance(v, torch.Tensor)]
        self.symint_outputs = [i for i, v in enumerate(out_values) if isinstance(v, torch.SymInt)]
        # The exporter names a graph input after the output that returns it unchanged: bind by name.
        tensor_index = {self.placeholders[p]: t for t, p in enumerate(self.tensor_positions)}
        self.input_of_name = {
            f"output_{i}": tensor_index[output_node.args[0][i]]
            for i in self.tensor_outputs
            if output_node.args[0][i] in tensor_index
        }
        self.values = values
        self.session = None
        self.stream: ort_binding.OrtStream | None = None  # CUDA: the session's own stream
        # a graph with no op to run (Dynamo leaves `return ()` graphs around graph breaks): nothing to export
        self.eager = not any(n.op == "call_function" for n in graph.graph.nodes)
        self.int_exprs: dict = {}
        self.carriers: list[int] = []
        self.symbols: dict = {}
        self.tracing_error: ExportError | None = None
        try:
            if self.unsupported:
                raise ExportError(self.unsupported[0], op="aten.index_put.default")
            self._locate_symbols()
        except ExportError as error:
            self.tracing_error = error

    # ----- preparing the inputs -----
    def _locate_symbols(self) -> None:
        """Map every symbol in the tensor inputs' shapes to a (tensor index, dim) that carries it, and
        express each integer input through them (unused integer inputs get 0)."""
        for t_index, position in enumerate(self.tensor_positions):
            value = self.values[position]
            if isinstance(value, torch.Tensor):
                for dim, size in enumerate(value.shape):
                    if _is_symbolic(size) and size.node.expr.is_symbol:
                        self.symbols.setdefault(size.node.expr, (t_index, dim))
        for position in self.int_positions:
            value = self.values[position]
            expr = value.node.expr if isinstance(value, torch.SymInt) else value
            if not self.placeholders[position].users:
                self.int_exprs[position] = 0
            elif all(symbol in self.symbols for symbol in getattr(expr, "free_symbols", ())):
                self.int_exprs[position] = expr
            elif getattr(expr, "is_symbol", False):
                # A size no tensor input carries: it travels as the length of a small uint8 tensor.
                self.symbols[expr] = (len(self.tensor_positions) + len(self.carriers), 0)
                self.carriers.append(position)
                self.int_exprs[position] = expr
            else:
                raise ExportError(
                    f"{self.kind} graph input {self.placeholders[position].name} = {expr} is not "
                    "computable from tensor dimensions"
                )

    def _session_inputs(self, args: list) -> list[torch.Tensor]:
        """The tensor inputs, then one uint8 tensor of length n per size n that no tensor carries."""
        # (Before the dropout masks are drawn, their slots are None.)
        return [
            *(args[p] if p < len(args) else None for p in self.tensor_positions),
            *(torch.empty(int(args[p]), dtype=torch.uint8) for p in self.carriers),
        ]

    def _symbol_values(self, args: list) -> dict:
        """This call's value of every symbol, read once per call off the inputs that carry them."""
        count = len(self.tensor_positions)
        return {
            s: (args[self.tensor_positions[t]].shape[d] if t < count else int(args[self.carriers[t - count]]))
            for s, (t, d) in self.symbols.items()
        }

    @staticmethod
    def _size(values: dict, value) -> int:
        """A (possibly symbolic) size of the traced graph, evaluated with this call's symbol values."""
        return int(value.node.expr.xreplace(values)) if isinstance(value, torch.SymInt) else int(value)

    def _draw_masks(self, args: list) -> list:
        """Dropout masks drawn by torch's own native_dropout, as eager would draw them (shape, dtype, strides)."""
        masks, values = [], self._symbol_values(args)
        for p, like in self.masks:
            shape = [self._size(values, s) for s in like.shape]
            stride = [self._size(values, s) for s in like.stride()]
            buffer = torch.empty_strided(shape, stride, dtype=like.dtype, device=like.device)
            masks.append(torch.ops.aten.native_dropout.default(buffer, p, True)[1])
        return masks

    # ----- export, cache, session -----
    def _cache_key(self, tensors: list[torch.Tensor]) -> str:
        import onnxruntime
        import onnxscript

        meta = [
            (str(v.dtype), [str(s) for s in v.shape])
            for v in (self.values[p] for p in self.tensor_positions)
            if isinstance(v, torch.Tensor)
        ]
        text = "\n".join(
            [
                self.graph.code,
                repr(meta),
                repr(self.int_exprs),
                torch.__version__,
                onnxruntime.__version__,
                onnxscript.__version__,
                ",".join(self.config.providers),
                "turbotrain-ort-1",
            ]
        )
        digest = hashlib.sha256(_renumber_symbols(text).encode())
        for name, buffer in self.graph.named_buffers():
            digest.update(
                name.encode() + buffer.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            )  # noqa: E501
        return digest.hexdigest()[:32]

    def _export(self, tensors: list[torch.Tensor]):
        dynamic = tuple(
            {dim: torch.export.Dim.AUTO for dim, size in enumerate(self.values[p].shape) if _is_symbolic(size)} or None
            for p in self.tensor_positions
        )
        dynamic += tuple({0: torch.export.Dim.AUTO} for _ in self.carriers)
        module = TensorInputs(self.graph, self.int_exprs, self.symbols, self.tensor_positions, self.tensor_outputs)
        names = [f"input_{i}" for i in range(len(tensors))]
        # Detached: parameters given to torch.export as user inputs fail inside its functionalization.
        return export_module(
            module,
            [t.detach() for t in tensors],
            names,
            [f"output_{i}" for i in self.tensor_outputs],
            dynamic_shapes={"inputs": dynamic},
        )

    def _open(self, tensors: list[torch.Tensor]) -> None:
        import time

        import onnxruntime as ort

        key = self._cache_key(tensors)
        cache = self.config.cache_dir
        path = cache / f"{key}.onnx" if cache else None
        if path is not None and path.is_file():
            STATS.cache_hits += 1
        else:
            start = time.perf_counter()
            proto = _in_clean_thread(self._export, tensors)
            STATS.exports += 1
            STATS.export_seconds += time.perf_counter() - start
            if path is None:
                self.session = self._session(ort, proto.SerializeToString())
                return
            save_onnx(proto, path)
        self.session = self._session(ort, str(path))

    def _session(self, ort, model):
        """A session on the configured providers (CUDA EP on a stream of its own, ort_binding.OrtStream)."""
        providers = self.config.providers
        if self.config.device_type == "cuda" and ort_binding.CUDA_PROVIDER in providers:
            self.stream = ort_binding.OrtStream()
        session = ort.InferenceSession(
            model,
            sess_options=self._session_options(ort),
            providers=list(providers),
            provider_options=ort_binding.provider_options(providers, self.stream),
        )
        ort_binding.require_providers_loaded(session, providers)
        return session

    def _session_options(self, ort):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        for name, value in self.config.session_options.items():
            setattr(options, name, value)
        return options

    # ----- running -----
    def _run_session(self, tensors: list[torch.Tensor], args: list | None = None) -> list[torch.Tensor]:
        """The session's tensor outputs for `tensors` (`args`: the graph's own arguments, for output sizes)."""
        binding = self.session.io_binding()
        for info in self.session.get_inputs():
            index = self.input_of_name.get(info.name)
            index = int(info.name.removeprefix("input_")) if index is None else index
            tensor = tensors[index].contiguous()
            tensors[index] = tensor  # keep the memory alive until the run ends
            where, device_id = ort_binding.location(tensor)
            kind = ort_binding.element_type(tensor.dtype)
            binding.bind_input(info.name, where, device_id, kind, tuple(tensor.shape), tensor.data_ptr())
        if self._preallocates():
            return self._run_into_torch_outputs(binding, tensors, args)
        # Outputs are allocated by ONNX Runtime and copied out once; binding preallocated torch tensors
        # instead measured slower here (0.74x vs 0.83x of eager TurboTrainer, benchmarks/).
        passthrough = {}
        for i in self.tensor_outputs:
            name = f"output_{i}"
            if name in self.input_of_name:  # an input returned unchanged: it is that tensor
                passthrough[name] = tensors[self.input_of_name[name]]
            else:
                binding.bind_output(name, "cpu")
        self.session.run_with_iobinding(binding)
        names = [o.name for o in self.session.get_outputs() if o.name not in passthrough]
        arrays = dict(zip(names, binding.copy_outputs_to_cpu()))
        return [
            passthrough[f"output_{i}"]
            if f"output_{i}" in passthrough
            else torch.from_numpy(np.asarray(arrays[f"output_{i}"]))
            for i in self.tensor_outputs
        ]

    def _preallocates(self) -> bool:
        dtypes = [self.out_values[i].dtype for i in self.tensor_outputs]
        return ort_binding.preallocates(self.config.device_type, dtypes)

    def _run_into_torch_outputs(self, binding, tensors: list[torch.Tensor], args: list | None) -> list[torch.Tensor]:
        """Outputs written by ONNX Runtime into torch tensors of the traced sizes, on the traced device."""
        if args is None:
            raise ExportError(f"{self.kind} graph: output sizes need the graph's arguments")
        values = self._symbol_values(args)
        results = []
        for i in self.tensor_outputs:
            name = f"output_{i}"
            if name in self.input_of_name:  # an input returned unchanged: it is that tensor
                results.append(tensors[self.input_of_name[name]])
                continue
            like = self.out_values[i]
            out = torch.empty([self._size(values, s) for s in like.shape], dtype=like.dtype, device=like.device)
            where, device_id = ort_binding.location(out)
            kind = ort_binding.element_type(out.dtype)
            binding.bind_output(name, where, device_id, kind, tuple(out.shape), out.data_ptr())
            results.append(out)
        if self.stream is not None:
            self.stream.before_run(tensors)
        self.session.run_with_iobinding(binding, ort_binding.run_options(self.config.device_type))
        if self.stream is not None:
            self.stream.after_run()
        return results

    def _assemble(self, args: list, tensor_outputs: list[torch.Tensor]) -> list:
        """Full output list: tensors in the expected strides, symbolic ints evaluated from input sizes."""
        results: list = list(self.out_values)
        for i, tensor in zip(self.tensor_outputs, tensor_outputs):
            results[i] = _restride(tensor, self.out_values[i])
        if self.symint_outputs:
            values = self._symbol_values(args)
            for i in self.symint_outputs:
                results[i] = self._size(values, self.out_values[i])
        return results

    def _fall_back(self, reason: str) -> None:
        self.eager = True
        STATS.fallbacks.append(reason)
        warn_once(f"turbotrain onnxruntime backend: a {self.kind} graph runs in eager PyTorch instead: {reason}")

    def __call__(self, *args):
        args = list(args)
        args += self._draw_masks(args) if self.masks else []
        if not self.eager and self.session is None:
            try:
                if self.tracing_error is not None:
                    raise self.tracing_error
                self._open(self._session_inputs(args))
            except ExportError as error:
                self._fall_back(f"ONNX export failed{f' at {error.op}' if error.op else ''} ({error})")
            except Exception as error:  # onnxruntime raises its own exception types when it loads a graph
                self._fall_back(f"ONNX Runtime could not load it ({type(error).__name__}: {str(error)[:300]})")
            return self._first_run(args)
        if self.eager:
            return self.graph(*args)
        return self._assemble(args, self._run_session(self._session_inputs(args), args))

    def _first_run(self, args: list) -> list:
        expected = self.graph(*args)
        if self.eager:
            return expected
        try:
            got = self._assemble(args, self._run_session(self._session_inputs(args), args))
        except Exception as error:  # onnxruntime raises its own exception types
            self._fall_back(f"ONNX Runtime could not run it ({type(error).__name__}: {str(error)[:300]})")
            return expected
        if self.config.check_first_run:
            mismatch = _first_mismatch(got, expected, self.output_names)
            if mismatch:
                self._fall_back(f"its outputs differ from eager ({mismatch})")
                return expected
        return got


def _renumber_symbols(text: str) -> str:
    """Symbol names (s52, u3) count compilations in the process; number them by first appearance."""
    import re

    order: dict[str, str] = {}
    return re.sub(r"\b([su])\d+\b", lambda m: order.setdefault(m.group(0), f"{m.group(1)}{len(order)}"), text)


def _in_clean_thread(function, *args):
    """Run `function` in a fresh thread: AOTAutograd's runtime leaves thread-local dispatch state (the
    functionalization keys) that torch.export must not inherit; a new thread starts without it."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(function, *args).result()


def _restride(tensor: torch.Tensor, expected) -> torch.Tensor:
    """Lay out a contiguous result in the stride order the graph's output had (dense, same order)."""
    if not isinstance(expected, torch.Tensor) or tensor.dim() < 2:
        return tensor
    strides = [
        int(s.node.hint) if isinstance(s, torch.SymInt) and s.node.hint is not None else s for s in expected.stride()
    ]
    if any(not isinstance(s, int) for s in strides):
        return tensor
    order = sorted(range(tensor.dim()), key=lambda d: -strides[d])
    if order == list(range(tensor.dim())):
        return tensor
    inverse = [order.index(d) for d in range(tensor.dim())]
    return tensor.permute(order).contiguous().permute(inverse)


def _first_mismatch(got: list, expected, names: list[str]) -> str | None:
    for i, (a, b) in enumerate(zip(got, expected)):
        where = f"output {i} ({names[i]})"
        if not isinstance(b, torch.Tensor):
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{where}: {tuple(a.shape)} {a.dtype} vs eager {tuple(b.shape)} {b.dtype}"
        if b.is_floating_point():
            scale = b.abs().max().item() if b.numel() else 0.0
            diff = (a - b).abs().max().item() if b.numel() else 0.0
            rtol = HALF_CHECK_RTOL if b.dtype in (torch.bfloat16, torch.float16) else CHECK_RTOL
            if diff > rtol * scale + CHECK_ATOL:
                return f"{where}: max difference {diff:.3g} at scale {scale:.3g}"
        elif not torch.equal(a, b):
            return f"{where}: integer values differ"
    return None
