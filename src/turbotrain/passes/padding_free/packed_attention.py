"""Attention within each sequence of packed rows, without a mask: padding-free's "sequences" mode.

Contract
--------
`turbotrain_packed_sdpa` and `turbotrain_packed_eager`, registered once with Transformers' public
`AttentionInterface`, stand in for a model's "sdpa" or "eager" attention while padding-free is installed
(`AttentionSwitch`, through `model.set_attn_implementation`; `restore()` puts the model's own back).
Each call is one of:
* a packed batch: the model-side hook adds `turbotrain_sequences` (a `PackedSequences`) to the model's
  keyword arguments, which Transformers hands to every attention call (so gradient checkpointing's
  recomputation sees them too). The call runs through the exact kernel kernel_choice.py chose for its kind
  (device, dtype, heads, lengths; measured once, cached): flash-attn's or torch's varlen kernel on CUDA in
  half precision, compiled flex attention with a block mask on accelerators, the model's own function over each row with a block-diagonal mask (stock + flattening's
  path), or the model's own function once per sequence length (attention_kernels.py; causal through
  `is_causal`, a sliding window shorter than the length a band mask). Each row's tail outputs zeros.
* anything else (padded batches: evaluation, batches left padded): the model's own function on the mask
  the model built: stock, to the bit.
The same names are registered with `AttentionMaskInterface` as the model's own mask functions, except
during a packed forward of that model (the hook marks its configs in a context variable), when every mask
is None: no [R, 1, C, C] (nor [R, 1, C, w]) tensor is built. The mark only saves work: a packed call
ignores its mask, so a packed forward that missed it would be exact all the same. Each context (thread: the
replicas of `nn.DataParallel`) opens and ends its own marks; a mark left open would take a later padded forward's masks
away, so one whose closing hook was skipped (a compiled forward that raised) is ended by
`end_open_forwards` (`OptimizeReport.end_forward`, which TurboTrainer calls when a step raises).

Exact: each sequence's queries meet exactly the keys stock's mask lets them meet (its own, causally, within
its window), through the model's own attention code or a fused kernel of the same formula: fp32 outputs
and gradients equal stock's to float summation order. Work: sum(l_i^2) per layer on the varlen and per-length
kernels (one call per distinct length on the latter), R * C^2 on the row mask, where measured faster.
Refused (the call raises, so padding-free's self-check fails and the mask modes are tried): positional
biases over the row (`position_bias`); eager models without a module-level `eager_attention_forward`.
Not switched: models whose attention Transformers cannot set at run time, and other implementations
(flash attention takes `cu_seq_lens_q` itself; flex gets block masks from masking_utils).
"""

from __future__ import annotations

import contextvars
import functools
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
from turbotrain.passes.padding_free import kernel_choice, packed_sequences
from turbotrain.passes.padding_free.attention_kernels import PackedCall
from turbotrain.passes.padding_free.packed_sequences import PackedSequences
from turbotrain.utils.batch_keys import ATTENTION_SEQUENCES

logger = logging.getLogger("turbotrain")

PREFIX = "turbotrain_packed_"
SWITCHABLE = ("sdpa", "eager")
# this context's open packed forwards, oldest first: (the switch, the configs whose masks are None meanwhile); per
# context, so that threads (nn.DataParallel's replicas) each open and end their own
_open_marks: contextvars.ContextVar[tuple[tuple[AttentionSwitch, frozenset[int]], ...]] = contextvars.ContextVar(
    "turbotrain_packed_marks", default=()
)


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
    call = PackedCall(stock, original, module, query, key, value, sequences, causal, kwargs)
    out = kernel_choice.attend(call)
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
    if config is not None and packed_now(config):
        return None
    return ALL_MASK_ATTENTION_FUNCTIONS[original](*args, **kwargs)


def packed_now(config) -> bool:
    """Whether a packed forward of the model of `config` is open in this context (its masks are None)."""
    return any(id(config) in configs for _, configs in _open_marks.get())


class AttentionSwitch:
    """A model switched onto the packed function; `restore()` switches it back to its own."""

    def __init__(self, model: nn.Module, original: str):
        self.model, self.original = model, original
        self.config_ids = frozenset(id(m.config) for m in model.modules() if hasattr(m, "config"))

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
        """Masks of this model are None until `unmark` (a packed forward is running); the masks the kernels build
        from the forward's segments are built once for all its layers meanwhile (packed_sequences.OncePerForward)."""
        packed_sequences.forward_begins()
        _open_marks.set((*_open_marks.get(), (self, self.config_ids)))

    @torch.compiler.disable
    def unmark(self) -> None:
        """This context's latest packed forward of this model ended (none open: nothing to do)."""
        marks = _open_marks.get()
        mine = [i for i, mark in enumerate(marks) if mark[0] is self]
        if mine:
            _open_marks.set(marks[: mine[-1]] + marks[mine[-1] + 1 :])
            packed_sequences.forward_ends()

    @torch.compiler.disable
    def end_open_forwards(self) -> None:
        """End every packed forward of this model still open in this context: one that raised where the model's
        forward hook was skipped (torch runs no `always_call` hook when a compiled forward raises), so that the
        model's next forward, padded, gets its masks."""
        while self.open_forwards():
            self.unmark()

    def open_forwards(self) -> int:
        """How many packed forwards of this model are open in this context."""
        return sum(mark[0] is self for mark in _open_marks.get())


class _Switched:
    def __init__(self, switch: AttentionSwitch):
        self.switch = switch

    def __enter__(self):
        self.switch.restore()

    def __exit__(self, *exc):
        hf_boundary.set_attention_implementation(self.switch.model, PREFIX + self.switch.original)
