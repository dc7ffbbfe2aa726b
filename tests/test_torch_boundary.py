"""The torch and jax boundaries: the private names turbotrain relies on exist with the signatures and keys
it uses, and no module but `torch_boundary.py` and `jax_boundary.py` uses a private torch or jax name."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import torch
from torch import nn

from turbotrain.backends.inductor import EXACT_PATCHES
from turbotrain.boundaries import jax_boundary, torch_boundary

PACKAGE = Path(torch_boundary.__file__).parent
BOUNDARIES = {Path(torch_boundary.__file__), Path(jax_boundary.__file__)}
ROOTS = ("torch", "jax", "jaxlib", "jnp")  # names a private is reached through
# private attributes of torch and jax objects the boundaries read or write
PRIVATE_ATTRIBUTES = ("_compiled_call_impl", "_schema", "_version", jax_boundary.JIT_CACHE_SIZE)


def test_inductor_takes_config_patches_with_the_exact_keys():
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    assert "config_patches" in inspect.signature(compile_fx).parameters
    for key in EXACT_PATCHES:
        assert hasattr(config, key), key


def test_saved_tensors_hooks_active_sees_checkpointing_and_user_hooks():
    assert not torch_boundary.saved_tensors_hooks_active()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        assert torch_boundary.saved_tensors_hooks_active()
    with torch.autograd.graph.save_on_cpu():
        assert torch_boundary.saved_tensors_hooks_active()
    seen = []
    layer = nn.Linear(2, 2)
    layer.register_forward_hook(lambda *_: seen.append(torch_boundary.saved_tensors_hooks_active()))
    torch.utils.checkpoint.checkpoint(layer, torch.ones(1, 2, requires_grad=True), use_reentrant=False)
    assert seen == [True]
    assert not torch_boundary.saved_tensors_hooks_active()


def test_uncompile_puts_a_compiled_module_back_on_eager():
    module = nn.Linear(2, 2)
    module.compile(backend="eager")
    assert module._compiled_call_impl is not None
    torch_boundary.uncompile(module)
    assert module._compiled_call_impl is None


def test_aot_autograd_and_decompositions():
    table = torch_boundary.core_aten_decompositions()
    backend = torch_boundary.aot_autograd(fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g, decompositions=table)
    compiled = torch.compile(nn.Linear(2, 2), backend=backend)
    compiled(torch.ones(1, 2, requires_grad=True)).sum().backward()  # forward and backward through it
    table = torch_boundary.core_aten_decompositions()
    assert torch.ops.aten.silu.default in table and isinstance(table, dict)


def test_no_duck_shapes_patches_the_fx_config():
    from torch.fx.experimental import _config as fx_config

    before = fx_config.use_duck_shape
    with torch_boundary.no_duck_shapes():
        assert fx_config.use_duck_shape is False
    assert fx_config.use_duck_shape == before


def test_dispatch_mode_overload_packets_and_op_schemas():
    seen = []

    class Recorder(torch_boundary.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Recorder():
        torch.ones(2) + 1
    assert torch.ops.aten.add.Tensor in seen
    assert isinstance(torch.ops.aten.add, torch_boundary.OpOverloadPacket)
    names = [argument.name for argument in torch_boundary.op_arguments(torch.ops.aten.native_dropout.default)]
    assert names == ["input", "p", "train"]


def test_fused_adamw_devices_are_read_from_torch():
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    assert torch_boundary.fused_optimizer_devices() == set(_get_fused_kernels_supported_devices())
    assert "cuda" in torch_boundary.fused_optimizer_devices()


@pytest.mark.requires_xla
def test_jax_jit_reports_its_cache_size():
    import jax

    jitted = jax.jit(lambda x: x * 2)
    assert jax_boundary.jit_cache_size(jitted) == 0
    jitted(1.0)
    assert jax_boundary.jit_cache_size(jitted) == 1
    assert jax_boundary.jit_cache_size(object()) == -1


def _dotted(node: ast.AST) -> list[str]:
    """`torch.utils._x.y` -> ["torch", "utils", "_x", "y"]; [] if the chain does not start at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else []


def _is_private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def private_uses(path: Path) -> list[str]:
    """Private torch/jax names a module imports or reaches, with their lines."""
    found = []
    tree = ast.parse(path.read_text())
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}  # `a.b` of `a.b.c`
    for node in ast.walk(tree):
        names: list[list[str]] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [[*node.module.split("."), alias.name] for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.Attribute):
            names = [] if id(node) in inner else [_dotted(node)]
            if node.attr in PRIVATE_ATTRIBUTES:
                found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in PRIVATE_ATTRIBUTES:
            found.append(f"{node.lineno}: '{node.value}'")
        for parts in names:
            if parts and parts[0] in ROOTS and parts[1:2] != ["ops"] and any(map(_is_private, parts[1:])):
                found.append(f"{node.lineno}: {'.'.join(parts)}")
    return sorted(found, key=lambda use: int(use.split(":")[0]))


def test_no_private_torch_or_jax_name_outside_the_boundaries():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{use}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in BOUNDARIES
        for use in private_uses(path)
    ]
    assert not offenders, "private torch/jax names belong in torch_boundary.py or jax_boundary.py:\n" + "\n".join(
        offenders
    )


def test_the_scan_would_catch_private_uses(tmp_path):
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text(
        "import torch._dynamo\n"
        "from torch.utils._foreach_utils import x\n"
        "def f(m, jitted):\n"
        "    m._compiled_call_impl = m.op._schema.arguments\n"
        "    torch._inductor.config.fallback_random = True\n"
        "    torch.ops.aten._to_copy.default  # an ATen op's name: not private\n"
        "    return getattr(jitted, '_cache_size')()\n"
    )
    assert private_uses(sneaky) == [
        "1: torch._dynamo",
        "2: torch.utils._foreach_utils.x",
        "4: ._compiled_call_impl",
        "4: ._schema",
        "5: torch._inductor.config.fallback_random",
        "7: '_cache_size'",
    ]


def test_at_backward_end_runs_once_the_backward_has_finished():
    seen = []
    weight = torch.ones(3, requires_grad=True)

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            torch_boundary.at_backward_end(lambda: seen.append(weight.grad.clone()))
            return grad * 2

    Probe.apply(weight).sum().backward()
    assert len(seen) == 1 and seen[0].tolist() == [2.0, 2.0, 2.0]  # the gradient was already accumulated


def test_run_backward_is_torch_autograd_backward_past_its_torch_function_check():
    from torch.autograd import _make_grads  # noqa: F401  (the names run_backward reaches)
    from torch.autograd.graph import _engine_run_backward  # noqa: F401

    def grads(backward):
        w = torch.ones(3, requires_grad=True)
        v = torch.full((3,), 2.0, requires_grad=True)
        out = (w * v * torch.arange(3.0)).sum()
        backward(out, w)
        return w.grad, v.grad

    stock = grads(lambda out, w: torch.autograd.backward(out, inputs=[w]))
    mine = grads(lambda out, w: torch_boundary.run_backward((out,), (None,), False, False, (w,)))
    assert torch.equal(stock[0], mine[0]) and stock[1] is None and mine[1] is None
