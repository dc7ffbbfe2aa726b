"""Packed attention through torch's flex attention with a block mask built from the batch's segments.

`flex(call)`: query [R, H, C, D], key/value [R, KV, C, D] (GQA through `enable_gqa`) in one compiled flex
attention launch; returns [R * C, H, Dv] with each row's tail zeroed, like every kernel of attention_kernels.py.
The mask: token q meets token k when both lie in one segment of `cu_seq_lens_q` (a sequence, or a row's tail),
causally (q >= k) where the model is causal, and |q - k| < s under a sliding window s. Soft-capping is a score
modification (cap * tanh(score / cap), after scaling, as Transformers' eager code); dropout and attention sinks
are not expressible here (attention_kernels.py does not offer this kernel for them).

The block mask is built without a [C, C] tensor: segments are non-decreasing along a row, so two 128-token
blocks meet where their segment ranges overlap (and causality and the window allow), and are full (no mask
evaluated) where both lie in one segment and every pair of positions is allowed; R * (C / 128)^2 work on the
device, no host sync; blocks with no real token (rows' tails only) are skipped. One mask per batch and (causal,
window), shared by every layer of the step.

Exact: the same formula over the same keys as the model's attention; fp32 agrees to summation order (tested on
the CPU, forward only: torch has no CPU backward for flex attention), half precision to the kernel's rounding.
Compiled once per process (`torch.compile`, dynamic shapes on accelerators; a row count of 1, or sizes that
happen to be equal in the first batch and differ later, compile once more, and every variant (window or not,
soft-cap or not, gradients or not) counts against Dynamo's 8 compiles of `flex_attention`, past which torch runs
it uncompiled, with a warning). The CPU takes this kernel only when forced: there inductor's flex template failed
to build with dynamic shapes and a score modification (torch 2.13), so every new batch shape would compile again
(~3 s) and, past Dynamo's 8, run uncompiled over every pair; its forward at its best (one 16k-token row, the block
mask built) took 0.89-0.90x per length's time (benchmarks/2026-12-05-cpu-kernel-choice.md): about the choice's
margin.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

from turbotrain.passes.padding_free.packed_sequences import CU_SEQ_LENS, real_token_mask, real_tokens_only, segment_ids

BLOCK = 128  # flex attention's default sparse block
_masks: dict = {}  # the current batch's block masks: (causal, window, device) -> BlockMask, and "batch"


def flex(call) -> torch.Tensor:
    """[R * C, H, Dv]: `call` (an attention_kernels.PackedCall) through compiled flex attention, in the call's
    compute dtype (its backward refuses mixed query, key and value dtypes: autocast's fp32 rotary queries)."""
    query, key, value = call.in_compute_dtype()
    rows, heads, capacity, _ = query.shape
    block_mask = _block_mask(call)
    cap = call.kwargs.get("softcap")
    score_mod = _soft_cap(float(cap)) if cap else None
    attend = _compiled(query.device.type)
    out = attend(query, key, value, score_mod=score_mod, block_mask=block_mask, scale=call.kwargs.get("scaling"),
                 enable_gqa=key.shape[1] != heads)  # fmt: skip
    return real_tokens_only(out.transpose(1, 2).reshape(rows * capacity, heads, out.shape[-1]), call.sequences.order)


def takes(call) -> bool:
    """Whether flex attention can express `call`: torch has it, the call has segments, no dropout, no sinks."""
    if CU_SEQ_LENS[0] not in call.kwargs or call.kwargs.get("dropout") or call.kwargs.get("s_aux") is not None:
        return False
    return _has_flex()


@functools.cache
def _has_flex() -> bool:
    return importlib.util.find_spec("torch.nn.attention.flex_attention") is not None


@functools.cache
def _compiled(device_type: str):
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=device_type != "cpu")


@functools.cache
def _soft_cap(cap: float):
    def soft_cap(score, batch, head, q_index, kv_index):
        return cap * torch.tanh(score / cap)

    return soft_cap


def _block_mask(call):
    """The batch's block mask for the call's (causal, window), built on the batch's first call and reused."""
    cu = call.kwargs[CU_SEQ_LENS[0]]
    if _masks.get("batch") is not cu:  # a new batch: the previous one's masks are stale
        _masks.clear()
        _masks["batch"] = cu  # held, so its id is never reused while cached
    rows, _, capacity, _ = call.query.shape
    key = (call.causal, call.window, call.query.device, rows, capacity)
    mask = _masks.get(key)  # one lookup: a DataParallel replica's thread may clear the dict meanwhile
    if mask is None:
        segments, real = _padded_rows(call)
        mask = _masks[key] = block_mask(segments, real, call.causal, call.window, capacity)
    return mask


def _padded_rows(call) -> tuple[torch.Tensor, torch.Tensor]:
    """[R, C'] segment ids per row and whether each position holds a real token, C' = C rounded up to `BLOCK`;
    positions past C get a segment of their own (beyond every real one: rows stay non-decreasing)."""
    rows, _, capacity, _ = call.query.shape
    device = call.query.device
    segments = segment_ids(call.kwargs[CU_SEQ_LENS[0]], rows * capacity, device).view(rows, capacity)
    real = real_token_mask(call.sequences.order, rows * capacity, device).view(rows, capacity)
    extra = -capacity % BLOCK
    if extra:
        beyond = segments[:, -1:].max() + 1
        segments = torch.cat([segments, beyond.expand(rows, extra)], dim=1)
        real = torch.cat([real, real.new_zeros(rows, extra)], dim=1)
    return segments, real


def block_mask(segments: torch.Tensor, real: torch.Tensor, causal: bool, window: int | None, length: int):
    """A flex `BlockMask` over `length` positions of rows whose segment ids `segments` [R, C'] (C' a multiple of
    `BLOCK`) are non-decreasing, `real` [R, C'] marking real tokens: the allowed pairs as above."""
    from torch.nn.attention.flex_attention import BlockMask

    meets, full = block_classes(segments, real, causal, window)
    on_cpu = segments.device.type == "cpu"  # CUDA's kernel wraps indices past `length`; the CPU's is kept in range
    looked_up = segments if on_cpu else segments[:, :length].contiguous()  # no size equal to C' by chance: no guard
    return BlockMask.from_kv_blocks(*_sparse(meets & ~full), *_sparse(full), BLOCK_SIZE=BLOCK,
                                    mask_mod=_mask_mod(looked_up, causal, window), seq_lengths=(length, length))  # fmt: skip


def block_classes(segments: torch.Tensor, real: torch.Tensor, causal: bool, window: int | None):
    """([R, n, n] blocks that hold an allowed pair of a real query, [R, n, n] blocks whose every pair is allowed),
    n = C' / BLOCK. Blocks without a real token are skipped: a tail's outputs are zeroed, so its queries' keys and
    the keys only tails meet do not matter (rows with no key left give zeros, and no gradient)."""
    first, last = segments[:, ::BLOCK], segments[:, BLOCK - 1 :: BLOCK]  # [R, n]: each block's segment range
    n = first.shape[1]
    has_real = real.view(real.shape[0], n, BLOCK).any(-1)
    q_block = torch.arange(n, device=segments.device)[:, None]
    gap = (q_block - q_block.T).abs()
    meets = (first[:, :, None] <= last[:, None, :]) & (first[:, None, :] <= last[:, :, None])
    meets &= has_real[:, :, None] & has_real[:, None, :]
    one = first == last
    full = one[:, :, None] & one[:, None, :] & (first[:, :, None] == first[:, None, :])
    if causal:
        meets &= q_block >= q_block.T
        full &= q_block > q_block.T
    if window is not None:
        meets &= (gap - 1).clamp(min=0) * BLOCK + (gap > 0).long() < window  # the nearest pair of the blocks
        full &= gap * BLOCK + BLOCK - 1 < window  # the farthest
    return meets, full & meets


def _sparse(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[R, n, n] bool -> ([R, 1, n] counts, [R, 1, n, n] the kv block indices of each query block, listed first)."""
    blocks = blocks[:, None]
    order = torch.argsort(blocks.to(torch.int8), dim=-1, descending=True, stable=True)
    return blocks.sum(-1, dtype=torch.int32), order.to(torch.int32)


def _mask_mod(segments: torch.Tensor, causal: bool, window: int | None):
    def allowed(batch, head, q_index, kv_index):
        ok = segments[batch, q_index] == segments[batch, kv_index]
        if causal:
            ok = ok & (q_index >= kv_index)
        if window is not None:
            ok = ok & ((q_index - kv_index).abs() < window)
        return ok

    return allowed
