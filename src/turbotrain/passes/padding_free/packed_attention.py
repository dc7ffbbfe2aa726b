"""Attention within each sequence of packed rows, without a mask: padding-free's "sequences" mode.

Contract
--------
`turbotrain_packed_sdpa` and `turbotrain_packed_eager`, registered once with Transformers' public
`AttentionInterface`, stand in for a model's "sdpa" or "eager" attention while padding-free is installed
(`AttentionSwitch`, through `model.set_attn_implementation`; `restore()` puts the model's own back).
Each call is one of:
* a packed batch: the model-side hook adds `turbotrain_sequences` (a `PackedSequences`) to the model's
  keyword arguments, which Transformers hands to every attention call (so gradient checkpointing's
  recomputation sees them too). Query, key and value [R, H, C, D] are flattened to tokens [R * C, H, D]:
  - on CUDA in bf16/fp16: flash-attn's `flash_attn_varlen_func` where it is installed (it soft-caps and
    drops out), else torch's `varlen_attn` (torch.nn.attention.varlen; no soft-cap, dropout or sinks),
    one launch on `cu_seq_lens_q`; a sliding window s is (s - 1, 0) causal, (s - 1, s - 1) bidirectional;
  - otherwise (CPU, fp32, soft-capping, sinks, dropout) per length: the sequences of one length are
    gathered as one batch [count, H, length, D] and the model's own attention function runs on it
    (Transformers' SDPA, causal through `is_causal`, GQA its way; or the model's module-level
    `eager_attention_forward`, so soft-capping, sinks and scaling are the model's code). A sliding window
    shorter than the length becomes a [length, length] band mask (causal: 0 <= q - k < s; bidirectional:
    |q - k| < s, the `sliding_window` keyword's meaning in Transformers' flash path); an eager causal call
    gets its causal mask the same way. Each row's tail is not attended: its outputs are zeros.
* anything else (padded batches: evaluation, batches left padded): the model's own function on the mask
  the model built: stock, to the bit.
The same names are registered with `AttentionMaskInterface` as the model's own mask functions, except
during a packed forward of that model (the hook marks its configs in a context variable), when every mask
is None: no [R, 1, C, C] (nor [R, 1, C, w]) tensor is built. The mark only saves work: a packed call
ignores its mask, so a forward that misses it (a thread of `nn.DataParallel`) is exact all the same.

Exact: each sequence's queries meet exactly the keys stock's mask lets them meet (its own, causally, within
its window), through the model's own attention code or a fused kernel of the same formula: fp32 outputs
and gradients equal stock's to float summation order. Work: sum(l_i^2) per layer instead of R * C^2, and
one attention call per distinct length per layer on the per-length path.
Refused (the call raises, so padding-free's self-check fails and the mask modes are tried): positional
biases over the row (`position_bias`); eager models without a module-level `eager_attention_forward`.
Not switched: models whose attention Transformers cannot set at run time, and other implementations
(flash attention takes `cu_seq_lens_q` itself; flex gets block masks from masking_utils).
"""

from __future__ import annotations

import contextvars
import functools
import importlib.util
import inspect
import logging
import sys
from functools import partial

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from turbotrain import modeling
from turbotrain.boundaries import hf_boundary
from turbotrain.passes.padding_free.packed_sequences import CU_SEQ_LENS, MAX_LENGTHS, PackedSequences
from turbotrain.utils.batch_keys import ATTENTION_SEQUENCES
from turbotrain.utils.warnings import warn_once

logger = logging.getLogger("turbotrain")

PREFIX = "turbotrain_packed_"
SWITCHABLE = ("sdpa", "eager")
_HALF = (torch.bfloat16, torch.float16)
_packed_configs: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "turbotrain_packed_configs", default=frozenset()
)
_kernel_failed: set[str] = set()


def register() -> None:
    """Register the packed attention and mask functions with Transformers (idempotent)."""
    for original in SWITCHABLE:
        if PREFIX + original not in ALL_ATTENTION_FUNCTIONS.valid_keys():
            AttentionInterface.register(PREFIX + original, partial(packed_attention_forward, original))
            AttentionMaskInterface.register(PREFIX + original, partial(_packed_mask, original))


def packed_attention_forward(original: str, module: nn.Module, query, key, value, attention_mask, **kwargs):
    """The registered function: per-sequence attention for a packed call, the model's own otherwise."""
    sequences = kwargs.pop(ATTENTION_SEQUENCES, None)
    stock = _stock_function(original, module)
    if sequences is None:
        return stock(module, query, key, value, attention_mask, **kwargs)
    return _attend_within_sequences(stock, original, module, query, key, value, sequences, kwargs)


@torch.compiler.disable  # a loop over this batch's lengths: traced, it would recompile for every batch
def _attend_within_sequences(stock, original, module, query, key, value, sequences: PackedSequences, kwargs):
    if kwargs.get("position_bias") is not None:
        raise NotImplementedError("packed attention cannot split a position bias over the row")
    causal = kwargs.pop("is_causal", None)
    causal = getattr(module, "is_causal", True) if causal is None else causal
    rows, heads, capacity, _ = query.shape
    out = _fused_varlen(query, key, value, causal, kwargs)
    if out is None:
        out = _per_length(stock, original, module, query, key, value, sequences, causal, kwargs)
    return out.view(rows, capacity, heads, value.shape[-1]), None


def _stock_function(original: str, module: nn.Module):
    return ALL_ATTENTION_FUNCTIONS["sdpa"] if original == "sdpa" else _eager_function(type(module))


@functools.cache
def _eager_function(attention_class: type):
    """The module-level `eager_attention_forward` of the model file that defines `attention_class`."""
    eager = getattr(sys.modules.get(attention_class.__module__), "eager_attention_forward", None)
    if eager is None:
        raise NotImplementedError(f"{attention_class.__name__}'s module has no eager_attention_forward to call")
    return eager


@torch.compiler.disable  # Dynamo cannot trace a ContextVar
def _packed_mask(original: str, *args, **kwargs):
    config = kwargs.get("config")
    if config is not None and id(config) in _packed_configs.get():
        return None
    return ALL_MASK_ATTENTION_FUNCTIONS[original](*args, **kwargs)


def _tokens(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[3])  # [R, H, C, D] -> [R * C, H, D]


def _per_length(stock, original, module, query, key, value, sequences: PackedSequences, causal, kwargs):
    """The model's own attention once per sequence length: [count, H, length, D] per call."""
    order = sequences.order
    q, k, v = (_tokens(x).index_select(0, order) for x in (query, key, value))  # [N, H, D]: by length
    window = kwargs.get("sliding_window")
    call = {n: x for n, x in kwargs.items() if n not in (*CU_SEQ_LENS, *MAX_LENGTHS, "position_ids")}
    if original == "sdpa":
        call["is_causal"] = causal
    outputs, offset = [], 0
    for count, length in sequences.groups:
        size = count * length
        part = [x[offset : offset + size].view(count, length, *x.shape[1:]).transpose(1, 2) for x in (q, k, v)]
        mask = _length_mask(length, causal, window, eager=original == "eager", like=query)
        out, _ = stock(module, *part, mask, **call)  # [count, length, H, Dv]
        outputs.append(out.reshape(size, *out.shape[2:]))
        offset += size
    total = query.shape[0] * query.shape[2]
    if not outputs:
        return query.new_zeros(total, query.shape[1], value.shape[-1])
    attended = torch.cat(outputs)  # its dtype, not the query's: under autocast fp32 queries give bf16 outputs
    return attended.new_zeros(total, *attended.shape[1:]).index_copy(0, order, attended)


def _length_mask(length: int, causal: bool, window: int | None, eager: bool, like: torch.Tensor):
    """[1, 1, L, L] mask for one length (bool; additive for eager), or None where none is needed."""
    binds = window is not None and window < length
    if not binds and not (causal and eager):
        return None
    distance = torch.arange(length, device=like.device)[:, None] - torch.arange(length, device=like.device)
    allowed = distance >= 0 if causal else torch.ones_like(distance, dtype=torch.bool)
    if binds:
        allowed &= distance.abs() < window
    if eager:
        return torch.zeros(allowed.shape, dtype=like.dtype, device=like.device).masked_fill(
            ~allowed, torch.finfo(like.dtype).min
        )[None, None]
    return allowed[None, None]


def _fused_varlen(query, key, value, causal: bool, kwargs: dict) -> torch.Tensor | None:
    """[R * C, H, Dv] from one varlen kernel over the flattened rows, or None where none applies."""
    kernel = _varlen_kernel(query, value, kwargs)
    if kernel is None:
        return None
    q, k, v = (_tokens(x).contiguous() for x in (query, key, value))
    cu = kwargs[CU_SEQ_LENS[0]].to(q.device, torch.int32, non_blocking=True)  # no-op where the Trainer moved it
    longest, window = kwargs[MAX_LENGTHS[0]], kwargs.get("sliding_window")
    left = -1 if window is None else window - 1
    scale = kwargs.get("scaling")
    try:
        if kernel == "flash_attn":
            from flash_attn import flash_attn_varlen_func

            return flash_attn_varlen_func(
                q, k, v, cu, cu, longest, longest, dropout_p=kwargs.get("dropout", 0.0), softmax_scale=scale,
                causal=causal, window_size=(left, left), softcap=kwargs.get("softcap") or 0.0,
            )  # fmt: skip
        from torch.nn.attention.varlen import varlen_attn

        right = 0 if causal else left
        gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}  # _varlen_kernel checked it is taken
        return varlen_attn(q, k, v, cu, cu, longest, longest, scale=scale, window_size=(left, right), **gqa)
    except Exception as error:  # a kernel this GPU or build lacks: say so once, attend per length from now on
        _kernel_failed.add(kernel)
        warn_once(f"turbotrain: packed attention's {kernel} kernel failed ({type(error).__name__}: {error}); "
                  "attending per sequence length instead (exact, slower)")  # fmt: skip
        return None


@functools.cache
def _takes_keyword(function, name: str) -> bool:
    return name in inspect.signature(function).parameters


def _varlen_kernel(query, value, kwargs: dict) -> str | None:
    """Which fused varlen kernel takes this call: "flash_attn", "torch", or None (module docstring)."""
    if query.device.type != "cuda" or query.dtype not in _HALF or CU_SEQ_LENS[0] not in kwargs:
        return None
    if query.shape[-1] != value.shape[-1] or query.shape[-1] > 256 or kwargs.get("s_aux") is not None:
        return None
    if "flash_attn" not in _kernel_failed and _installed("flash_attn"):
        return "flash_attn"
    plain = not kwargs.get("dropout") and kwargs.get("softcap") is None
    if plain and "torch" not in _kernel_failed and _installed("torch.nn.attention.varlen"):
        return "torch" if torch_varlen_takes(query.shape[1], value.shape[1]) else None
    return None


def torch_varlen_takes(query_heads: int, kv_heads: int) -> bool:
    """Whether torch's `varlen_attn` takes a call with these head counts: GQA needs its `enable_gqa` keyword
    (torch 2.13 has it; 2.11 has not). Without it a GQA call attends per length: on an H200 with torch 2.11,
    KV heads repeated for varlen_attn made a Qwen2-layout SFT step 6x slower than per-length SDPA
    (benchmarks/2026-12-04-h200.md), while models without GQA gained from the kernel (MLM 0.08x -> 1.65x)."""
    if query_heads == kv_heads:
        return True
    from torch.nn.attention.varlen import varlen_attn

    return _takes_keyword(varlen_attn, "enable_gqa")


@functools.cache
def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


class AttentionSwitch:
    """A model switched onto the packed function; `restore()` switches it back to its own."""

    def __init__(self, model: nn.Module, original: str):
        self.model, self.original = model, original
        self.config_ids = frozenset(id(m.config) for m in model.modules() if hasattr(m, "config"))
        self._marks: list[contextvars.Token] = []

    @classmethod
    def apply(cls, model: nn.Module) -> tuple[AttentionSwitch | None, str | None]:
        """(the switch, None), or (None, why the model cannot be switched)."""
        inner = modeling.unwrap(model)
        original = hf_boundary.attention_implementation(inner.config)
        if original not in SWITCHABLE:
            return None, f"its attention implementation '{original}' is not sdpa or eager"
        register()
        if not hf_boundary.set_attention_implementation(inner, PREFIX + original):
            return None, "Transformers cannot switch its attention at run time"
        return cls(inner, original), None

    def follow(self) -> bool:
        """Whether the packed function is the model's attention now; a model switched to another "sdpa" or
        "eager" after install is switched onto the packed function of that one (the caller handles others)."""
        current = hf_boundary.attention_implementation(self.model.config)
        if current == PREFIX + self.original:
            return True
        if current not in SWITCHABLE or not hf_boundary.set_attention_implementation(self.model, PREFIX + current):
            return False
        logger.info("turbotrain: packed rows now attend through the model's new attention, '%s', per sequence", current)
        self.original = current
        return True

    def restore(self) -> None:
        hf_boundary.set_attention_implementation(self.model, self.original)

    def stock(self):
        """A context in which the model runs its own attention (the self-check's reference forward)."""
        return _Switched(self)

    @torch.compiler.disable
    def mark_packed(self) -> None:
        """Masks of this model are None until `unmark` (a packed forward is running)."""
        self._marks.append(_packed_configs.set(_packed_configs.get() | self.config_ids))

    @torch.compiler.disable
    def unmark(self) -> None:
        if self._marks:
            _packed_configs.reset(self._marks.pop())


class _Switched:
    def __init__(self, switch: AttentionSwitch):
        self.switch = switch

    def __enter__(self):
        self.switch.restore()

    def __exit__(self, *exc):
        hf_boundary.set_attention_implementation(self.switch.model, PREFIX + self.switch.original)
