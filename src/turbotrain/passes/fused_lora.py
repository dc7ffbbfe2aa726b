"""Fused LoRA: PEFT's LoRA `Linear` (no dropout, one active adapter) as one autograd op over the frozen base.

Stock (`peft.tuners.lora.Linear.forward`) runs `base(x) + lora_B(lora_A(dropout(x))) * scaling` as five
launches: the base GEMM, the A and B GEMMs, a multiply by `scaling` and an add, the last two each a full
pass that writes a new [N, out] tensor; backward replays the multiply, then adds the base's and the
adapter's input gradients, a new [N, in] tensor. With x [N, in], W [out, in], A [r, in], B [out, r], s:

    forward   out = x W^T + b  (one addmm)          h = x A^T  [N, r]
              out += s · h B^T (addmm_, in place: the scaling rides in the GEMM's alpha)
    backward  gh = s · g B  [N, r]     grad_B = s · g^T h  [out, r]     grad_A = gh^T x  [r, in]
              grad_x = g W, then grad_x += gh A (addmm_, in place)

No gradient is built for the frozen W or b (stock builds none either); it saves what stock saves (x and h;
W, A and B are parameters), and peaks lower: one [N, out] tensor in forward where stock holds up to three,
one [N, in] in backward where stock holds two. Measured: see benchmarks/2026-12-01-cpu-fused-lora-op.md.
Not done, measured (docs/fused_lora.md): the base and A projections in one GEMM over stacked [W; A].

Exact: the same products and sums; only the float rounding of `s` and of the in-place adds differs
(fp32: output and every gradient within 1e-5 relative, tests/passes/test_fused_lora.py; bf16: loose).
Under autocast the inputs are cast to the autocast dtype first, as autocast casts them for stock's
linear layers, and the op runs with autocast off.

Where: every `peft.tuners.lora.Linear` (exactly that class) that `refusal` accepts (the list: docs/fused_lora.md);
other LoRA layers stay stock, one info line says how many and why. Adapters in another dtype than the base fuse
only under autocast, where stock computes in one dtype too. Each call checks again (`refusal`, tracing, devices
other than CPU and CUDA) and runs stock's forward where it no longer holds.
Refused in a run whose parameters an engine shards (DeepSpeed ZeRO-3, FSDP: `trainer_refusal`, naming it): the
engine gathers each module's parameters for that module's own call, not its parent's.
Saved state is untouched: the same parameters (state dict keys, `save_pretrained`, `merge_and_unload` as stock's); `remove()` takes the forwards off. At install one layer of each shape is compared with
stock's forward and backward on a small random input; a mismatch leaves the model stock (one warning).
On an accelerator each layer shape is then timed against PEFT's forward (passes/device_timing.py): a shape
where the fused op is slower keeps PEFT's forward (one warning with both times).
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass

import torch
from torch import nn

from turbotrain.boundaries.hf_boundary import sharding_engine
from turbotrain.passes import device_timing
from turbotrain.passes.installed import ReplacedForwards
from turbotrain.passes.registry import PassOptions, TrainerFacts, option, register_pass
from turbotrain.passes.self_check import forward_raises, never_raises
from turbotrain.utils.warnings import log_once, warn_once

AUTOCAST_DEVICES = ("cpu", "cuda")  # where the fused op runs: autocast casts as for stock linear layers there
FLOAT_DTYPES = {torch.float32, torch.bfloat16, torch.float16}


class _LoraLinear(torch.autograd.Function):
    """y = x W^T + b + s · (x A^T) B^T on x [N, in], with gradients for x, A and B only (W and b frozen)."""

    @staticmethod
    def forward(ctx, x, weight, bias, lora_a, lora_b, scaling: float):
        hidden = x @ lora_a.t()  # [N, r]
        out = torch.addmm(bias, x, weight.t()) if bias is not None else x @ weight.t()  # [N, out]
        out.addmm_(hidden, lora_b.t(), alpha=scaling)
        need_x, need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[3], ctx.needs_input_grad[4]
        ctx.save_for_backward(x if need_a else None, hidden if need_b else None, weight, lora_a, lora_b)
        ctx.scaling, ctx.need = scaling, (need_x, need_a, need_b)
        return out

    @staticmethod
    def backward(ctx, g):  # g [N, out]
        x, hidden, weight, lora_a, lora_b = ctx.saved_tensors
        need_x, need_a, need_b = ctx.need
        grad_x = grad_a = grad_b = None
        if need_b:
            grad_b = (g.t() @ hidden).mul_(ctx.scaling)  # [out, r]
        if need_x or need_a:
            grad_hidden = (g @ lora_b).mul_(ctx.scaling)  # [N, r]
            if need_a:
                grad_a = grad_hidden.t() @ x  # [r, in]
            if need_x:
                grad_x = (g @ weight).addmm_(grad_hidden, lora_a)  # [N, in]
        return grad_x, None, None, grad_a, grad_b, None


def fused_lora_linear(x, weight, bias, lora_a, lora_b, scaling: float) -> torch.Tensor:
    """`x W^T + b + scaling · (x A^T) B^T` as one op, autocast applied as to stock's linear layers.

    The [..., in] <-> [N, in] reshapes stay outside the autograd.Function, so the output is an ordinary
    tensor that callers may modify in place (a view made inside a Function may not be)."""
    device_type = x.device.type
    leading = x.shape[:-1]
    if device_type in AUTOCAST_DEVICES and torch.is_autocast_enabled(device_type):
        dtype = torch.get_autocast_dtype(device_type)
        x, weight, lora_a, lora_b = (t.to(dtype) for t in (x, weight, lora_a, lora_b))
        bias = bias.to(dtype) if bias is not None else None
        with torch.autocast(device_type, enabled=False):
            out = _LoraLinear.apply(x.reshape(-1, x.shape[-1]), weight, bias, lora_a, lora_b, scaling)
    else:
        out = _LoraLinear.apply(x.reshape(-1, x.shape[-1]), weight, bias, lora_a, lora_b, scaling)
    return out.view(*leading, out.shape[-1])


def _lora_classes():
    """(PEFT's LoRA `Linear`, `LoraLayer`), or None when PEFT is not imported (then no model has LoRA layers)."""
    if "peft" not in sys.modules:
        return None
    from peft.tuners.lora import Linear, LoraLayer

    return Linear, LoraLayer


def _hooked(module: nn.Module) -> bool:
    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks
    )


def _plain(tensor) -> bool:
    return type(tensor) in (torch.Tensor, nn.Parameter)  # not a DTensor or a quantized wrapper (ZeRO-3: its hooks)


def refusal(layer: nn.Module) -> str | None:
    """Why this LoRA `Linear` cannot run fused now (None: it can). Checked at install and on every call."""
    try:
        return _refusal(layer)
    except (AttributeError, KeyError) as error:  # a PEFT release that lays its layer out otherwise
        return f"a LoRA layer layout this pass does not know ({type(error).__name__}: {error})"


def _refusal(layer: nn.Module) -> str | None:
    if layer.disable_adapters or layer.merged:
        return "merged or disabled adapters"
    active = layer.active_adapters
    if len(active) != 1:
        return "several active adapters"
    name = active[0]
    if name not in layer.lora_A:
        return "no adapter of the active name"
    base, lora_a, lora_b = layer.base_layer, layer.lora_A[name], layer.lora_B[name]
    if type(base) is not nn.Linear or layer.fan_in_fan_out:
        return "a base that is not a plain nn.Linear (quantized or wrapped)"
    if type(layer.lora_dropout[name]) is not nn.Identity:
        return "lora_dropout > 0"
    if name in getattr(layer, "lora_variant", {}) or layer.use_dora.get(name):
        return "DoRA or another LoRA variant"
    if getattr(layer, "lora_bias", {}).get(name) or type(lora_a) is not nn.Linear or type(lora_b) is not nn.Linear:
        return "lora_bias or custom adapter modules"
    if lora_b.bias is not None or lora_a.bias is not None:
        return "lora_bias or custom adapter modules"
    tensors = _tensors(layer, name)
    if not all(_plain(t) for t in tensors) or not {t.dtype for t in tensors} <= FLOAT_DTYPES:
        return "float64 or wrapped (quantized, sharded, distributed) parameters"
    if base.weight.requires_grad or (base.bias is not None and base.bias.requires_grad):
        return "a base weight that trains"
    if _hooked(base) or _hooked(lora_a) or _hooked(lora_b):
        return "hooks on its base or adapter modules"
    return None


def _tensors(layer: nn.Module, name: str) -> list[torch.Tensor]:
    """Base weight (and bias), A and B of the adapter `name`."""
    base = layer.base_layer
    tensors = [base.weight, layer.lora_A[name].weight, layer.lora_B[name].weight]
    return tensors + ([base.bias] if base.bias is not None else [])


def _mixed_dtypes(layer: nn.Module) -> bool:
    """Adapters in another dtype than the base (PEFT upcasts adapters of a bf16 model to fp32 by default)."""
    return len({t.dtype for t in _tensors(layer, layer.active_adapters[0])}) > 1


def _fused_forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    stock = type(self).forward
    if args or kwargs or x.device.type not in AUTOCAST_DEVICES or torch.compiler.is_compiling():
        return stock(self, x, *args, **kwargs)
    if refusal(self) is not None:
        return stock(self, x, *args, **kwargs)
    name = self.active_adapters[0]
    base, lora_a, lora_b = self.base_layer, self.lora_A[name].weight, self.lora_B[name].weight
    if not torch.is_autocast_enabled(x.device.type) and (x.dtype != base.weight.dtype or _mixed_dtypes(self)):
        return stock(self, x, *args, **kwargs)  # stock's own casts (or dtype error) without autocast: leave to it
    return fused_lora_linear(x, base.weight, base.bias, lora_a, lora_b, self.scaling[name])


class FusedLora(ReplacedForwards):
    """The installed pass: the LoRA layers (`modules`) whose forward runs fused; `remove()` restores stock's."""

    def __init__(self, layers: list[nn.Module]):
        super().__init__(layers, _fused_forward)


def lora_layers(model: nn.Module) -> list[nn.Module]:
    """Every PEFT LoRA layer of the model (any kind: Linear, Embedding, Conv, quantized bases)."""
    classes = _lora_classes()
    return [] if classes is None else [m for m in model.modules() if isinstance(m, classes[1])]


@never_raises
def _layer_mismatch(layer: nn.Module) -> str | None:
    """Stock and fused forward and backward of `layer` on a small random input: None if they agree.
    Adapters in another dtype than the base are compared under autocast to the base's dtype (where they fuse)."""
    name = layer.active_adapters[0]
    weight = layer.base_layer.weight
    params = [layer.lora_A[name].weight, layer.lora_B[name].weight]
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, layer.in_features, generator=generator).to(weight.device, weight.dtype).requires_grad_()
    g = torch.randn(2, 3, layer.out_features, generator=generator).to(weight.device, weight.dtype)
    mixed = _mixed_dtypes(layer)
    tolerance = 1e-4 if weight.dtype == torch.float32 and not mixed else 2e-2
    autocast = torch.autocast(weight.device.type, dtype=weight.dtype, enabled=mixed)
    with forward_raises("fused forward"), torch.enable_grad(), autocast:
        results = []
        for forward in (type(layer).forward, _fused_forward):
            y = forward(layer, x)
            inputs = [x] + [p for p in params if p.requires_grad]
            results.append([y, *torch.autograd.grad(y, inputs, g)])
    for expected, got in zip(*results):
        scale = expected.abs().max().clamp_min(1e-12)
        if not (got - expected).abs().max() <= tolerance * scale:
            return "fused output or gradients differ from stock's"
    return None


def _checked(layers: list[nn.Module]) -> str | None:
    seen = set()
    for layer in layers:
        base = layer.base_layer
        shape = (layer.in_features, layer.out_features, base.bias is not None, base.weight.dtype, _mixed_dtypes(layer))
        if shape not in seen:
            seen.add(shape)
            problem = _layer_mismatch(layer)
            if problem is not None:
                return problem
    return None


def apply_fused_lora(model: nn.Module, check: bool = True) -> FusedLora | None:
    """Run the model's eligible PEFT LoRA `Linear` layers fused; None if it has none (one info line why)."""
    layers = lora_layers(model)
    if not layers:
        return None
    lora_linear = _lora_classes()[0]
    reasons = Counter(
        "another kind of LoRA layer (embedding, convolution, quantized base)"
        if type(layer) is not lora_linear
        else refusal(layer)
        for layer in layers
    )
    eligible = [layer for layer in layers if type(layer) is lora_linear and refusal(layer) is None]
    refused = {reason: count for reason, count in reasons.items() if reason is not None}
    if refused:
        listed = "; ".join(f"{count} with {reason}" for reason, count in refused.items())
        log_once(f"turbotrain: fused_lora left {sum(refused.values())} of {len(layers)} LoRA layers stock: {listed}")
    if not eligible:
        return None
    mixed = sum(_mixed_dtypes(layer) for layer in eligible)
    if mixed:
        log_once(
            f"turbotrain: fused_lora: {mixed} LoRA layers keep adapters in another dtype than their base (PEFT's "
            "fp32 adapters on a 16-bit model): fused under autocast (bf16=True, fp16=True), PEFT's forward otherwise"
        )
    problem = _checked(eligible) if check else None
    if problem is not None:
        warn_once(f"turbotrain: fused_lora left {type(model).__name__} stock: {problem}.")
        return None
    eligible = device_timing.keep_where_faster(
        "fused_lora", eligible, _timed_shape, lambda layer: layer.in_features, _peft_forward, _fused_forward
    )
    return FusedLora(eligible) if eligible else None


def _timed_shape(layer: nn.Module) -> tuple:
    name = layer.active_adapters[0]
    dropout = type(layer.lora_dropout[name]).__name__  # Identity or Dropout: one more kernel each way
    base = "base trained" if layer.base_layer.weight.requires_grad else "base frozen"
    return ("LoRA", layer.in_features, layer.out_features, "r", layer.lora_A[name].out_features, dropout, base)


def _peft_forward(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return type(layer).forward(layer, x)


def trainer_refusal(trainer, facts: TrainerFacts) -> str | None:
    """Why a sharded run keeps PEFT's forward: the engine gathers a module's parameters for its own call only."""
    engine = sharding_engine(trainer)
    if engine is None or trainer.model is None or not lora_layers(trainer.model):
        return None
    return (
        f"{engine} gathers each module's parameters only for that module's own call, and the fused op reads the "
        "base and adapter weights from the LoRA layer's (each call would fall back to PEFT's forward)"
    )


@register_pass(
    order=55,
    install=lambda model, setup: apply_fused_lora(model, check=setup.check),
    refused_for=lambda model: bool(lora_layers(model)),  # no LoRA layer: nothing to do
    refused_by_trainer=trainer_refusal,
)
@dataclass(frozen=True)
class FusedLoraOptions(PassOptions):
    """Run each eligible PEFT LoRA Linear (lora_dropout=0, one active adapter) as one op: base and adapter GEMMs
    with the scaling folded in, no gradient built for the frozen base (passes/fused_lora.py)."""

    fused_lora: bool = option(True)
