"""The exact kernels one packed attention call can run through (packed_attention.py asks kernel_choice.py which).

A call (`PackedCall`) is the model's attention on packed rows: query, key and value [R, H, C, D] (KV heads may
be fewer: GQA), the batch's `PackedSequences` and `cu_seq_lens_q` (every sequence, and each row's unused tail, a
segment of the flattened [R * C] tokens). Every kernel returns [R * C, H, Dv] in which each sequence's queries
met exactly the keys stock's padded mask lets them meet (its own, causally where the model is causal, within its
sliding window s: causal 0 <= q - k < s, bidirectional |q - k| < s), and each row's tail is zeros:

* `flash_attn`: flash-attn's `flash_attn_varlen_func`, one launch (CUDA, bf16/fp16, head dim <= 256; soft-caps
  and drops out; installed by the user); like `torch_varlen`, it sees each row's tail as one more sequence, whose
  outputs are then zeroed;
* `torch_varlen`: torch's `varlen_attn`, one launch (CUDA, bf16/fp16; no soft-cap, dropout or sinks; GQA only
  where it has `enable_gqa`, torch >= 2.13: repeating KV heads measured 6x slower on torch 2.11);
* `flex`: torch's flex attention, compiled, with a block mask built from the segments (flex_kernel.py): one
  launch, any dtype, GQA, windows and soft-caps (no dropout or sinks); measured on accelerators where no varlen
  kernel takes the call (fp32 runs, soft-caps without flash-attn, GQA on torch < 2.13): its first use compiles
  (tens of seconds a process), which a varlen kernel of the same formula does not need; on the CPU only when
  forced and without gradients (torch has no CPU backward for it);
* `row_mask`: the model's own attention function once over the rows with a [R, 1, C, C] block-diagonal mask:
  what stock Transformers runs on a flattened batch (`DataCollatorWithFlattening`); R * C^2 work and mask bytes,
  so only up to `ROW_MASK_MAX_ELEMENTS` and `ROW_MASK_MAX_WASTE` times the sequences' own sum(l^2); soft-capping, sinks and scaling are the model's code;
* `per_length`: the model's own attention once per sequence length, [count, H, length, D] per call: sum(l^2)
  work, one call per distinct length; takes every call (the reference the others are checked against).

The fused kernels (`flash_attn`, `torch_varlen`, `flex`) take query, key and value in the dtype the model's own
function computes in (`PackedCall.compute_dtype`: autocast's where it is on, as SDPA is cast), so a `bf16=True`
run of fp32 weights is a half-precision call for them.

`applicable(call)` lists the kernels that can take a call, in the order preferred when nothing is measured;
`forcible(call)` those a forced choice may take (flex on the CPU besides).
Exact: each kernel computes the same formula over the same keys; fp32 outputs and gradients agree to float
summation order, half precision to the kernels' rounding (kernel_choice.py drops any that disagrees).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from turbotrain.passes.padding_free import flex_kernel
from turbotrain.passes.padding_free.packed_sequences import (
    CU_SEQ_LENS,
    MAX_LENGTHS,
    OncePerForward,
    PackedSequences,
    real_tokens_only,
    segment_ids,
)
from turbotrain.utils.warnings import warn_once

_HALF = (torch.bfloat16, torch.float16)
_CAST_BY_AUTOCAST = (torch.float32, *_HALF)  # what autocast casts for its lower-precision ops (not float64)
ROW_MASK_MAX_ELEMENTS = 1 << 28  # R * C * C: a 256 MB bool mask (16k tokens in one row)
ROW_MASK_MAX_WASTE = {"cpu": 2.0, "accelerator": 16.0}  # R * C^2 over sum(l^2) where the row mask is still tried
_NOT_FOR_THE_MODEL = (*CU_SEQ_LENS, *MAX_LENGTHS, "position_ids")


@dataclass
class PackedCall:
    """One attention call on packed rows: the model's own function (`stock`, of the `original` implementation,
    "sdpa" or "eager"), its attention module, query/key/value [R, H, C, D], the sequences, whether it is
    causal, and the other keywords Transformers passed (scaling, dropout, sliding_window, softcap, ...)."""

    stock: Any
    original: str
    module: nn.Module
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    sequences: PackedSequences
    causal: bool
    kwargs: dict

    @property
    def window(self) -> int | None:
        return self.kwargs.get("sliding_window")

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the model's own function computes this call in: autocast's where autocast is on for the
        call's device (it casts SDPA and the matmuls of eager attention; under `bf16=True` with fp32 weights
        rotary models hand over fp32 queries and keys beside a bf16 value), the query's otherwise. The fused
        kernels take their inputs in it, as the model's function does."""
        return _autocast_dtype(self.query.device.type, self.query.dtype) or self.query.dtype

    def in_compute_dtype(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """query, key and value in `compute_dtype` (the tensors themselves where they are in it already)."""
        dtype = self.compute_dtype
        return self.query.to(dtype), self.key.to(dtype), self.value.to(dtype)

    def without_dropout(self) -> PackedCall:
        """The same call with attention dropout off: kernels are compared on the formula, not on their draws."""
        return replace(self, kwargs={**self.kwargs, "dropout": 0.0})

    def with_tensors(self, query, key, value) -> PackedCall:
        return replace(self, query=query, key=key, value=value)

    def model_keywords(self) -> dict:
        """The keywords the model's own function takes (not the varlen metadata)."""
        call = {n: x for n, x in self.kwargs.items() if n not in _NOT_FOR_THE_MODEL}
        if self.original == "sdpa":
            call["is_causal"] = self.causal  # Transformers' SDPA leaves it to a mask where one is given
        return call


def _autocast_dtype(device_type: str, dtype: torch.dtype) -> torch.dtype | None:
    """Autocast's dtype where it is on for `device_type` and casts `dtype`; None elsewhere, and for device types
    autocast does not know (meta; mps before torch 2.5), which it answers with an error."""
    if dtype not in _CAST_BY_AUTOCAST:
        return None
    try:
        enabled = torch.is_autocast_enabled(device_type)
    except RuntimeError:
        return None
    return torch.get_autocast_dtype(device_type) if enabled else None


def _tokens(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[3])  # [R, H, C, D] -> [R * C, H, D]


# --- the kernels ---------------------------------------------------------------------------------------------


def per_length(call: PackedCall) -> torch.Tensor:
    """The model's own attention once per sequence length: [count, H, length, D] per call."""
    query, value, order = call.query, call.value, call.sequences.order
    q, k, v = (_tokens(x).index_select(0, order) for x in (query, call.key, value))  # [N, H, D]: by length
    keywords = call.model_keywords()
    outputs, offset = [], 0
    for count, length in call.sequences.groups:
        size = count * length
        part = [x[offset : offset + size].view(count, length, *x.shape[1:]).transpose(1, 2) for x in (q, k, v)]
        mask = _band(length, call.causal, call.window, eager=call.original == "eager", like=query)
        out, _ = call.stock(call.module, *part, mask, **keywords)  # [count, length, H, Dv]
        outputs.append(out.reshape(size, *out.shape[2:]))
        offset += size
    total = query.shape[0] * query.shape[2]
    if not outputs:
        return query.new_zeros(total, query.shape[1], value.shape[-1])
    attended = torch.cat(outputs)  # its dtype, not the query's: under autocast fp32 queries give bf16 outputs
    return attended.new_zeros(total, *attended.shape[1:]).index_copy(0, order, attended)


def _band(length: int, causal: bool, window: int | None, eager: bool, like: torch.Tensor):
    """[1, 1, L, L] mask for one length (bool; additive for eager), or None where none is needed."""
    binds = window is not None and window < length
    if not binds and not (causal and eager):
        return None
    distance = torch.arange(length, device=like.device)[:, None] - torch.arange(length, device=like.device)
    allowed = distance >= 0 if causal else torch.ones_like(distance, dtype=torch.bool)
    if binds:
        allowed &= distance.abs() < window
    return _as_mask(allowed[None, None], eager, like.dtype, like.device)


@OncePerForward
def _block_mask(cu_seq_lens: torch.Tensor, rows: int, capacity: int, causal: bool, window: int | None,
                eager: bool, dtype: torch.dtype, device) -> torch.Tensor:  # fmt: skip
    """[R, 1, C, C]: which key each query of a packed row meets (its own segment, causally, within the window), as
    a bool mask, or as the additive mask of the model's eager attention. Built once a forward (OncePerForward)."""
    segment = segment_ids(cu_seq_lens, rows * capacity, device).view(rows, capacity)
    distance = torch.arange(capacity, device=device)[:, None] - torch.arange(capacity, device=device)
    allowed = segment[:, :, None] == segment[:, None, :]  # [R, C, C]
    if causal:
        allowed &= distance >= 0
    if window is not None and window < capacity:
        allowed &= distance.abs() < window
    return _as_mask(allowed[:, None], eager, dtype, device)


def _as_mask(allowed: torch.Tensor, eager: bool, dtype: torch.dtype, device) -> torch.Tensor:
    if not eager:
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)


def row_mask(call: PackedCall) -> torch.Tensor:
    """The model's own attention over each packed row with a block-diagonal mask (tails attend within their own
    segment, so no query meets no key; their outputs are then zeroed)."""
    query, value = call.query, call.value
    rows, heads, capacity, _ = query.shape
    mask = _block_mask(call.kwargs[CU_SEQ_LENS[0]], rows, capacity, call.causal, call.window,
                       call.original == "eager", query.dtype, query.device)  # fmt: skip
    keywords = call.model_keywords()  # with a mask, Transformers' SDPA is not causal: the mask carries it
    out, _ = call.stock(call.module, query, call.key, value, mask, **keywords)  # [R, C, H, Dv]
    return real_tokens_only(out.reshape(rows * capacity, heads, out.shape[-1]), call.sequences.order)


def flash_attn(call: PackedCall) -> torch.Tensor:
    from flash_attn import flash_attn_varlen_func

    q, k, v, cu, longest, left = _varlen_inputs(call)
    out = flash_attn_varlen_func(
        q, k, v, cu, cu, longest, longest, dropout_p=call.kwargs.get("dropout", 0.0),
        softmax_scale=call.kwargs.get("scaling"), causal=call.causal, window_size=(left, left),
        softcap=call.kwargs.get("softcap") or 0.0,
    )  # fmt: skip
    return real_tokens_only(out, call.sequences.order)  # the tails, segments of their own, attended each other


def torch_varlen(call: PackedCall) -> torch.Tensor:
    from torch.nn.attention.varlen import varlen_attn

    q, k, v, cu, longest, left = _varlen_inputs(call)
    right = 0 if call.causal else left
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}  # `applicable` checked it is taken
    out = varlen_attn(q, k, v, cu, cu, longest, longest, scale=call.kwargs.get("scaling"), window_size=(left, right),
                      **gqa)  # fmt: skip
    return real_tokens_only(out, call.sequences.order)  # the tails, segments of their own, attended each other


def _varlen_inputs(call: PackedCall):
    q, k, v = (_tokens(x).contiguous() for x in call.in_compute_dtype())
    cu = call.kwargs[CU_SEQ_LENS[0]].to(q.device, torch.int32, non_blocking=True)  # no-op where the Trainer moved it
    left = -1 if call.window is None else call.window - 1
    return q, k, v, cu, call.kwargs[MAX_LENGTHS[0]], left


KERNELS = {
    "flash_attn": flash_attn,
    "torch_varlen": torch_varlen,
    "per_length": per_length,
    "flex": flex_kernel.flex,
    "row_mask": row_mask,
}


# --- which kernels take a call -------------------------------------------------------------------------------


def applicable(call: PackedCall, failed: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """The kernels that can take `call` (none of `failed`), in the order preferred when nothing is measured."""
    varlen = _varlen_kernels(call)
    names = [*varlen, "per_length"]
    if not varlen and call.query.device.type != "cpu" and flex_kernel.takes(call):
        names.append("flex")  # where no one-launch varlen kernel takes the call: see the module docstring
    if _row_mask_worth_trying(call):
        names.append("row_mask")
    return [name for name in names if name not in failed]


def forcible(call: PackedCall, failed: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """The kernels that take `call` when forced (kernel_choice.forced): the measured ones, and flex on the CPU
    where no gradient is asked for (torch has no CPU backward for it; never measured there: it would compile
    for every batch shape, see flex_kernel.py)."""
    names = applicable(call, failed)
    needs_grad = torch.is_grad_enabled() and any(x.requires_grad for x in (call.query, call.key, call.value))
    if "flex" not in names and "flex" not in failed and not needs_grad and flex_kernel.takes(call):
        names.append("flex")
    return names


def _row_mask_worth_trying(call: PackedCall) -> bool:
    """The row mask computes R * C^2 scores where the sequences need sum(l^2): tried up to `ROW_MASK_MAX_ELEMENTS`
    and `ROW_MASK_MAX_WASTE` times the needed work on the call's device (a compute-bound CPU gains nothing from
    fewer launches: dense-mask packing lost to per-length attention there, benchmarks/2026-12-02-cpu-sft-long-lengths.md;
    beyond these the measurement alone would cost more than the kernel could save)."""
    rows, _, capacity, _ = call.query.shape
    if CU_SEQ_LENS[0] not in call.kwargs or rows * capacity * capacity > ROW_MASK_MAX_ELEMENTS:
        return False
    needed = sum(count * length * length for count, length in call.sequences.groups)
    waste = ROW_MASK_MAX_WASTE["cpu" if call.query.device.type == "cpu" else "accelerator"]
    return rows * capacity * capacity <= waste * max(needed, 1)


def _varlen_kernels(call: PackedCall) -> list[str]:
    query, value, kwargs = call.query, call.value, call.kwargs
    if query.device.type != "cuda" or call.compute_dtype not in _HALF or CU_SEQ_LENS[0] not in kwargs:
        return []
    if query.shape[-1] != value.shape[-1] or query.shape[-1] > 256 or kwargs.get("s_aux") is not None:
        return []
    names = ["flash_attn"] if installed("flash_attn") else []
    plain = not kwargs.get("dropout") and kwargs.get("softcap") is None
    if plain and installed("torch.nn.attention.varlen") and torch_varlen_takes(query.shape[1], call.key.shape[1]):
        names.append("torch_varlen")
    return names


def torch_varlen_takes(query_heads: int, kv_heads: int) -> bool:
    """Whether torch's `varlen_attn` takes a call with these head counts: the wrapper passes `scale` and
    `window_size`, which its first releases lacked (their `is_causal` only); GQA needs its `enable_gqa` keyword
    (torch 2.13 has it; 2.11 has not). Without it a GQA call takes another kernel: on an H200 with torch 2.11,
    KV heads repeated for varlen_attn made a Qwen2-layout SFT step 6x slower than per-length SDPA
    (benchmarks/2026-12-04-h200.md), while models without GQA gained from the kernel (MLM 0.08x -> 1.65x)."""
    from torch.nn.attention.varlen import varlen_attn

    if not (_takes_keyword(varlen_attn, "scale") and _takes_keyword(varlen_attn, "window_size")):
        return False
    return query_heads == kv_heads or _takes_keyword(varlen_attn, "enable_gqa")


@functools.cache
def _takes_keyword(function, name: str) -> bool:
    return name in inspect.signature(function).parameters


@functools.cache
def installed(module: str) -> bool:
    """Whether `module` imports here: flash-attn's package can be present and fail to import (built for another
    torch: "undefined symbol"), which must leave its kernel out, not fail every packed call."""
    if importlib.util.find_spec(module) is None:
        return False
    try:
        importlib.import_module(module)
    except Exception as error:  # noqa: BLE001  (any import failure: the kernel is not there)
        warn_once(f"turbotrain: packed attention leaves out {module}: it is installed but does not import "
                  f"({type(error).__name__}: {str(error)[:200]})")  # fmt: skip
        return False
    return True
