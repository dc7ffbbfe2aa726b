"""The boundary with torch's private names: every one turbotrain uses is used here, and only here.

torch moves and renames its private modules between releases (`torch._inductor`, `torch._dynamo`,
`torch._decomp`, `torch.utils._*`), as Transformers does its Trainer privates (hf_boundary.py). turbotrain
needs a few, so they are confined to this module, their signatures and keys are pinned by
`tests/test_torch_boundary.py`, and that test fails if a private torch name appears anywhere else in the
package (jax's one private, a jitted function's cache size, is in jax_boundary.py, under the same test).

* `inductor_compile(graph, example_inputs, config_patches)`: Inductor's compiler as a Dynamo backend,
  with `config_patches` (keys of `torch._inductor.config`, e.g. the inductor backend's exact settings).
* `uncompile(module)`: undo `nn.Module.compile` (torch keeps the compiled call in `_compiled_call_impl`).
* `aot_autograd(...)`: Dynamo's AOTAutograd backend factory (forward and backward graph compilers).
* `core_aten_decompositions()`: the core ATen decomposition table every traced training graph starts from.
* `no_duck_shapes()`: symbolic tracing without duck shapes (equal sizes stay distinct symbols).
* `op_arguments(op)`: an ATen overload's schema arguments (name, default_value).
* `fused_optimizer_devices()`: the device types with a fused (single-kernel) AdamW in this torch build.
* `tensor_version(tensor)`: the tensor's in-place update counter (autocast's cast cache keys on it too).
The others say what they wrap in their own docstrings.
"""

from __future__ import annotations

import torch
from torch import nn
from torch._ops import OpOverloadPacket  # noqa: F401  (re-exported: the class behind `torch.ops.*.*`)
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401  (re-exported: `__torch_dispatch__` modes)


def inductor_compile(graph_module: torch.fx.GraphModule, example_inputs, config_patches: dict):
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(graph_module, example_inputs, config_patches=dict(config_patches))


def has_triton() -> bool:
    """Whether Inductor finds a working Triton (its GPU code generator; `torch.utils._triton.has_triton`)."""
    from torch.utils._triton import has_triton as torch_has_triton

    return bool(torch_has_triton())


def uncompile(module: nn.Module) -> None:
    module._compiled_call_impl = None


def aot_autograd(**kwargs):
    from torch._dynamo.backends.common import aot_autograd as make

    return make(**kwargs)


def core_aten_decompositions() -> dict:
    from torch._decomp import core_aten_decompositions as table

    return dict(table())


def no_duck_shapes():
    from torch.fx.experimental import _config as fx_config

    return fx_config.patch(use_duck_shape=False)


def op_arguments(op) -> list:
    return list(op._schema.arguments)


def fused_optimizer_devices() -> set[str]:
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:  # older torch: CUDA only had it
        return {"cuda"}
    return set(_get_fused_kernels_supported_devices())


def compiled_graph_count() -> int:
    """Graphs Dynamo and AOTAutograd compiled in this process so far (`torch._dynamo.utils.counters`)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"] + counters["aot_autograd"]["total"]


def norms_fp32(tensors: list) -> list:
    """Each tensor's fp32 2-norm in one fused pass (`torch._foreach_norm`)."""
    return torch._foreach_norm(tensors, 2, dtype=torch.float32)


def tree_leaves(tree) -> list:
    """The leaves of a nest of lists, tuples and dicts (`torch.utils._pytree.tree_leaves`)."""
    from torch.utils import _pytree

    return _pytree.tree_leaves(tree)


def tree_map_only(kind, function, tree):
    """`function` applied to the leaves of `tree` that `kind` accepts (`torch.utils._pytree.tree_map_only`)."""
    from torch.utils import _pytree

    return _pytree.tree_map_only(kind, function, tree)


def at_backward_end(callback) -> None:
    """Queue `callback` to run when the current backward pass ends (`Variable._execution_engine.queue_callback`)."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


def backward_task_id() -> int:
    """The running backward pass's graph task id (`torch._C._current_graph_task_id`; -1 outside one)."""
    return torch._C._current_graph_task_id()


def will_accumulate(accumulator) -> bool:
    """Whether the running backward executes `accumulator`, a leaf's AccumulateGrad node
    (`torch._C._will_engine_execute_node`, which refuses leaves under `torch.autograd.grad`: never executed there)."""
    try:
        return bool(torch._C._will_engine_execute_node(accumulator))
    except RuntimeError:
        return False


def tensor_version(tensor: torch.Tensor) -> int:
    return tensor._version


def saved_tensors_hooks_active() -> bool:
    """Whether saved-tensor hooks are on now (`torch._C._autograd._top_saved_tensors_default_hooks`, which
    torch's checkpoint reads too); they would take over what a nested hook context packs."""
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


def saved_tensors_hooks_refused(tensor: torch.Tensor) -> bool:
    """Whether saved-tensor hooks cannot serve a graph built on `tensor`: torch has them off
    (`torch._C._autograd._saved_tensors_hooks_is_enabled`), or `tensor` is wrapped by a `torch.func` transform
    (`torch._C._functorch.is_functorch_wrapped_tensor`: grad, vjp, jacrev and vmap refuse the hooks)."""
    if not torch._C._autograd._saved_tensors_hooks_is_enabled():
        return True
    return bool(torch._C._functorch.is_functorch_wrapped_tensor(tensor))


def module_hooks_apply(module: nn.Module) -> bool:
    """Whether calling `module` runs forward hooks: its own (`_forward_hooks`, `_forward_pre_hooks`) or the global
    ones (`torch.nn.modules.module._global_forward_hooks`, `_global_forward_pre_hooks`)."""
    from torch.nn.modules import module as module_file

    own = module._forward_hooks or module._forward_pre_hooks
    return bool(own or module_file._global_forward_hooks or module_file._global_forward_pre_hooks)


def view_base(tensor: torch.Tensor) -> torch.Tensor | None:
    """The tensor `tensor` is a view of (`Tensor._base`), or None where it owns its storage. Under no_grad a view of
    a parameter is a leaf that requires grad, like the parameter: autocast's cast cache tells them apart so."""
    return tensor._base


def run_backward(
    tensors: tuple[torch.Tensor, ...],
    grad_tensors: tuple[torch.Tensor | None, ...],
    retain_graph: bool,
    create_graph: bool,
    inputs: tuple[torch.Tensor, ...],
) -> None:
    """What `torch.autograd.backward` does once its arguments are tuples and no `__torch_function__` took the call:
    the gradients made as it makes them, then the engine, accumulating into the leaves. So the engine starts under
    the torch function modes on the stack now (bf16_emulation.py: a mode's handler runs with that mode popped)."""
    from torch.autograd import _make_grads
    from torch.autograd.graph import _engine_run_backward

    grads = _make_grads(tensors, grad_tensors, is_grads_batched=False)
    _engine_run_backward(
        tensors, grads, retain_graph, create_graph, inputs, allow_unreachable=True, accumulate_grad=True
    )
