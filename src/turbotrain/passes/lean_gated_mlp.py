"""Lean gated MLP: keep gate and up for the backward, make act(gate) and act(gate)·up again from them.

A gated MLP (`modeling.gated_mlps`: Llama, Mistral, Qwen2/3, Gemma) computes, with x [N, hidden] and the
MLP's width I,

    gate = gate_proj(x)   up = up_proj(x)   a = act(gate)   h = a · up   out = down_proj(h)

and autograd keeps four [N, I] tensors until the backward: gate (the activation's), a and up (the
product's), h (down_proj's, for its weight's or LoRA A's gradient). At Qwen2.5-0.5B's shape (I = 4,864 =
5.4 × hidden) they are ~80% of what a LoRA layer keeps. Here a and h are not kept: what autograd would save
of them is replaced by a recipe (`torch.autograd.graph.saved_tensors_hooks`), and the backward makes them
again from gate and up, which stay kept anyway: two elementwise kernels per MLP (one act, one product;
the act made for h is handed on to the product's backward), no GEMM. Two of the four tensors go; the MLP's
forward and backward take 1% (full fine-tune) to 4% (fused LoRA) longer at that shape
(scripts/lean_mlp_cost.py; benchmarks/2026-12-04-cpu-lean-gated-mlp.md).

Exact: the recomputation runs the same kernels on the same inputs under the same autocast state, so a and h
come back bit for bit; loss and every gradient equal stock's bit for bit (tests/passes/test_lean_gated_mlp.py:
fp32 and bf16, bf16 weights or autocast, retained graphs, second-order gradients). Whatever the saved tensor is
(h itself, the 2-D view a linear layer keeps, the input of turbotrain's fused LoRA op), it is recognised by its
storage at the version it was made with, and made again with the same view; a tensor changed in place before
it is saved (a pre-hook scaling h) is kept as stock keeps it. Autograd checks the in-place version only of
tensors saved without hooks, so every other tensor saved inside the two hook contexts is checked at its unpack
here (`_Kept`), with autograd's message. The remaking calls the activation's `forward` without its hooks; where
hooks ran on the forward's call, the forward compares once that they left the output as `forward` makes it,
else that call keeps a and h as stock does.

Where: every gated MLP `modeling.gated_mlps` finds (the class's `forward` is the plain line, by its source; no
other library's per-instance forward; an activation that keeps only its input, not in place: otherwise gate
would be kept longer than stock keeps it), on each call that builds a graph: gradients on, gate and up needing
them, a plain tensor on a CPU or CUDA device, no other saved-tensor hooks on (non-reentrant gradient
checkpointing, `save_on_cpu`: they decide what is kept; under reentrant checkpointing the recomputed forward
is lean), not inside a `torch.func` transform (which refuses saved-tensor hooks), not compiling, exporting or
tracing (compiled graphs choose what they keep themselves). Any other call runs the module's own forward. At
install, one module of each class is compared bit for bit with its own forward and backward on a small random
input (eval mode, a forked random stream); a class that differs stays stock (one warning). `remove()` takes the
forwards off; parameters are untouched. Not saved: a with PEFT's fp32 adapters on a bf16 base (LoRA A keeps its
own fp32 copy of h, stock and lean alike); a backward that runs only some of down_proj's nodes
(`autograd.grad` for a subset) keeps gate and up until the graph is freed.
On an accelerator each MLP shape is also timed against its own forward (passes/device_timing.py): a shape where
the lean forward (two more elementwise kernels in the backward) is slower stays stock, in one warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from turbotrain.boundaries import liger_boundary
from turbotrain.boundaries.torch_boundary import (
    module_hooks_apply,
    saved_tensors_hooks_active,
    saved_tensors_hooks_refused,
    tensor_version,
)
from turbotrain.modeling import gated_mlps
from turbotrain.passes import device_timing
from turbotrain.passes.installed import ReplacedForwards
from turbotrain.passes.registry import PassOptions, TrainerFacts, option, register_pass
from turbotrain.passes.self_check import forward_raises, never_raises
from turbotrain.utils.mode import training_mode
from turbotrain.utils.warnings import warn_once

AUTOCAST_DEVICES = ("cpu", "cuda")  # where the forward's autocast state is read and set again for the remaking


class _Remade:
    """A saved tensor autograd does not keep: the view of the remade tensor to hand back."""

    __slots__ = ("make", "offset", "size", "stride")

    def __init__(self, make: Callable[[], torch.Tensor], saved: torch.Tensor):
        self.make, self.size, self.stride, self.offset = make, saved.size(), saved.stride(), saved.storage_offset()

    def unpack(self) -> torch.Tensor:
        return self.make().as_strided(self.size, self.stride, self.offset)


class _Kept:
    """A saved tensor kept as stock keeps it, with its in-place version at the save: autograd checks the version only
    of tensors saved without hooks, so the unpack checks it here. A tensor with a graph is kept detached (autograd
    puts its graph back at the unpack), so the hooks hold no reference cycle through an op that saves its output."""

    __slots__ = ("tensor", "version")

    def __init__(self, saved: torch.Tensor):
        self.tensor = saved.detach() if saved.grad_fn is not None else saved
        self.version = tensor_version(saved)

    def unpack(self) -> torch.Tensor:
        if tensor_version(self.tensor) != self.version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace operation "
                f"(a {tuple(self.tensor.shape)} tensor saved inside a gated MLP at version {self.version}, now at "
                f"version {tensor_version(self.tensor)}; turbotrain's lean_gated_mlp=False gives autograd's own hint)"
            )
        return self.tensor


def _remade_when_saved(target: torch.Tensor, make: Callable[[], torch.Tensor]):
    """Saved-tensor hooks under which a save of `target` as it is now (or of any view of its storage at its current
    version) keeps `make` instead; anything else saved is kept (`_Kept`)."""
    # not `target` itself in the closure: autograd keeps the hooks with what they packed
    storage, dtype, version = target.untyped_storage().data_ptr(), target.dtype, tensor_version(target)

    def pack(saved: torch.Tensor):
        same = saved.dtype == dtype and saved.untyped_storage().data_ptr() == storage
        return _Remade(make, saved) if same and tensor_version(saved) == version else _Kept(saved)

    def unpack(packed):
        return packed.unpack()

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


class _Recipe:
    """How one call's a = act(gate) and h = a · up are made again in the backward, under the forward's autocast.
    down_proj's backward runs first and makes a on the way to h; the product's backward takes that a."""

    def __init__(self, act: nn.Module, gate: torch.Tensor, up: torch.Tensor):
        self.act, self.gate, self.up = act, gate, up
        device = gate.device.type
        self.autocast = (device, torch.get_autocast_dtype(device), torch.is_autocast_enabled(device))
        self.handed_on: torch.Tensor | None = None

    def activation(self) -> torch.Tensor:
        made, self.handed_on = self.handed_on, None
        if made is not None:
            return made
        device, dtype, enabled = self.autocast
        with torch.autocast(device, dtype=dtype, enabled=enabled):
            return self.act.forward(self.gate)  # not through __call__: its hooks ran once, in the forward

    def product(self) -> torch.Tensor:
        activation = self.activation()
        self.handed_on = activation
        device, dtype, enabled = self.autocast
        with torch.autocast(device, dtype=dtype, enabled=enabled):
            return activation * self.up


def _contiguous_own_storage(tensor: torch.Tensor) -> bool:
    """Made fresh by its op: contiguous, alone in its storage from offset 0 (so the storage identifies it)."""
    nbytes = tensor.numel() * tensor.element_size()
    return tensor.is_contiguous() and tensor.storage_offset() == 0 and tensor.untyped_storage().nbytes() == nbytes


def _traced() -> bool:
    exporting = getattr(torch.compiler, "is_exporting", lambda: False)  # torch >= 2.7; compiling covers it before
    return torch.compiler.is_compiling() or exporting() or torch.jit.is_tracing()


def _stays_stock(x) -> bool:
    """Calls the lean forward leaves to the module's own: no graph built, traced, or another owner of the saves."""
    if not torch.is_grad_enabled() or _traced():
        return True
    if type(x) is not torch.Tensor or x.device.type not in AUTOCAST_DEVICES:
        return True  # a traced or wrapped tensor (fake, functional, DTensor): its storage is not its own
    return saved_tensors_hooks_active() or saved_tensors_hooks_refused(x)


def _remade_as_made(act: nn.Module, gate: torch.Tensor, activation: torch.Tensor) -> bool:
    """Whether `act.forward(gate)` (the backward's remaking, which runs no hooks) gives the forward's `activation`:
    checked only where hooks ran on the call (a hook may have changed the output), else true by construction."""
    if not module_hooks_apply(act):
        return True
    with torch.no_grad():
        return torch.equal(act.forward(gate), activation)


def _lean_forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    stock = type(self).forward
    if args or kwargs or _stays_stock(x):
        return stock(self, x, *args, **kwargs)
    gate, up = self.gate_proj(x), self.up_proj(x)  # stock's order of calls (a LoRA dropout draws in this order)
    if not (gate.requires_grad and up.requires_grad):  # nothing saved of them: keeping them would add memory
        return self.down_proj(self.act_fn(gate) * up)
    activation = self.act_fn(gate)
    if not _contiguous_own_storage(activation) or not _remade_as_made(self.act_fn, gate, activation):
        return self.down_proj(activation * up)
    recipe = _Recipe(self.act_fn, gate, up)
    with _remade_when_saved(activation, recipe.activation):
        hidden = activation * up
    if not _contiguous_own_storage(hidden):
        return self.down_proj(hidden)
    with _remade_when_saved(hidden, recipe.product):
        return self.down_proj(hidden)


class LeanGatedMlp(ReplacedForwards):
    """The installed pass: the MLPs (`modules`) whose forward keeps only gate and up; `remove()` restores stock's."""

    def __init__(self, modules: list[nn.Module]):
        super().__init__(modules, _lean_forward)


@never_raises
def _mismatch(module: nn.Module) -> str | None:
    """Stock and lean forward and backward of `module` on a small random input, in eval mode and on a forked random
    stream (the run's draws stay as stock's): None if they agree bit for bit."""
    weight = next(module.parameters())
    width = getattr(module.gate_proj, "in_features", None)
    if width is None:
        return "a gate projection without in_features"
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, width, generator=generator).to(weight.device, weight.dtype).requires_grad_()
    cuda = [weight.device.index or 0] if weight.device.type == "cuda" else []
    with forward_raises("lean forward"), torch.enable_grad(), training_mode(module, False), torch.random.fork_rng(cuda):
        results = []
        for forward in (type(module).forward, _lean_forward):
            out = forward(module, x)
            results.append([out, *torch.autograd.grad(out, [x], torch.ones_like(out))])
    if not all(torch.equal(expected, got) for expected, got in zip(*results)):
        return "its output or input gradient differs from its own forward's"
    return None


def _checked(modules: list[nn.Module]) -> list[nn.Module]:
    """The modules of each class whose first member computes what the lean forward computes."""
    verdicts: dict[type, str | None] = {}
    for module in modules:
        if type(module) not in verdicts:
            verdicts[type(module)] = _mismatch(module)
            if verdicts[type(module)] is not None:
                warn_once(f"turbotrain: lean_gated_mlp left {type(module).__name__} stock: {verdicts[type(module)]}")
    return [module for module in modules if verdicts[type(module)] is None]


def apply_lean_gated_mlp(model: nn.Module, check: bool = True) -> LeanGatedMlp | None:
    """Make the model's gated MLPs keep only gate and up for the backward; None if it has none (or none pass)."""
    modules = gated_mlps(model)
    if check:
        modules = _checked(modules)
    modules = device_timing.keep_where_faster(
        "lean_gated_mlp", modules, _timed_shape, lambda mlp: mlp.gate_proj.in_features, _own_forward, _lean_forward
    )
    return LeanGatedMlp(modules) if modules else None


def _timed_shape(mlp: nn.Module) -> tuple:
    """The MLP's kind, widths, and what changes the cost of its projections: their class (LoRA, fused LoRA or a
    plain Linear) and whether any weight trains."""
    trains = any(p.requires_grad for p in mlp.parameters())
    return (type(mlp).__name__, mlp.gate_proj.in_features, mlp.gate_proj.out_features,
            type(mlp.gate_proj).__name__, "trained" if trains else "frozen")  # fmt: skip


def _own_forward(mlp: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return type(mlp).forward(mlp, x)


def trainer_refusal(trainer, facts: TrainerFacts) -> str | None:
    """Why this run keeps the MLPs stock: Liger's gated MLP takes their forward (`use_liger_kernel=True`, bound on
    each instance at train() after this pass would be), or non-reentrant gradient checkpointing (Transformers' and
    TRL's default kind) packs every saved tensor of a layer itself, so the lean forward would step aside on every
    call; the summary says so instead of listing the pass. Reentrant checkpointing keeps it (the recomputed forward
    is lean)."""
    args = trainer.args
    if "mlp" in liger_boundary.liger_replaces(trainer.model, args):
        return "use_liger_kernel=True: Liger's SwiGLU/GeGLU replaces each MLP's forward"
    on = getattr(args, "activation_checkpointing", getattr(args, "gradient_checkpointing", False))
    kwargs = getattr(args, "activation_checkpointing_kwargs", getattr(args, "gradient_checkpointing_kwargs", None))
    if not on or (kwargs or {}).get("use_reentrant") is True or trainer.model is None or not gated_mlps(trainer.model):
        return None
    return (
        "non-reentrant gradient checkpointing decides what each layer keeps (the pass would step aside on every "
        "call); gradient_checkpointing_kwargs={'use_reentrant': True} keeps it on"
    )


@register_pass(
    order=57,
    install=lambda model, setup: apply_lean_gated_mlp(model, check=setup.check),
    refused_for=lambda model: bool(gated_mlps(model)),  # no gated MLP: nothing to do
    refused_by_trainer=trainer_refusal,
)
@dataclass(frozen=True)
class LeanGatedMlpOptions(PassOptions):
    """Gated MLPs (Llama, Mistral, Qwen2, Gemma) keep only gate and up for the backward and make act(gate) and
    act(gate)*up again there: two elementwise kernels, two fewer [tokens, MLP width] tensors kept, bit-exact
    (passes/lean_gated_mlp.py)."""

    lean_gated_mlp: bool = option(True)
