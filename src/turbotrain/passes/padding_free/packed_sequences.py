"""Where each sequence of a packed batch lies: the metadata per-sequence attention takes instead of a mask.

Made in the collator from the packer's layout (packing.py), O(tokens), on the host, never [R, 1, C, C]:

* `cu_seq_lens_q`, `cu_seq_lens_k` [S + 1] int32: the boundaries of every segment of the flattened rows
  [R * C]: each sequence, and each row's unused tail as a segment of its own, so that every token is in
  one (a varlen kernel leaves a token outside every segment unwritten: garbage that a NaN would carry
  into the head's weight gradient through its zero loss gradient); `max_length_q`, `max_length_k`: the
  longest segment, a Python int (a kernel's launch size: no host sync in the step). These are the names
  Transformers' flash-attention path takes from the model's keyword arguments (`FlashAttentionKwargs`);
* `turbotrain_packed_sequences`, a `PackedSequences`: `order` [N] long, the flattened index of every real
  token, the sequences grouped by length (every sequence of the shortest length, each in its order, then the
  next length ...), and `groups` ((count, length), ...): the per-length attention (packed_attention.py)
  gathers one group as [count, length] and runs one attention call for all its sequences. One object, not
  a tuple of ints in the batch: torch.compile guards on the ints it sees, and would recompile for every
  batch's lengths; it has `pin_memory()` for the DataLoader and the hook moves it to the model's device.

The model-side hook hands it to the attention function as `turbotrain_sequences`.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

import torch

CU_SEQ_LENS = ("cu_seq_lens_q", "cu_seq_lens_k")
MAX_LENGTHS = ("max_length_q", "max_length_k")
from turbotrain.utils.batch_keys import PACKED_SEQUENCES  # noqa: E402  (the batch key, defined in the leaf)


@dataclass(frozen=True)
class PackedSequences:
    """The real tokens of packed rows by sequence length: `order` [N] flattened token indices, `groups`
    ((count, length), ...) in the same order (count sequences of `length` tokens each)."""

    order: torch.Tensor
    groups: tuple[tuple[int, int], ...]

    def to(self, device) -> PackedSequences:
        return PackedSequences(self.order.to(device, non_blocking=True), self.groups)

    def pin_memory(self) -> PackedSequences:  # the DataLoader's pin_memory=True calls it
        return PackedSequences(self.order.pin_memory(), self.groups)


def segment_ids(cu_seq_lens: torch.Tensor, tokens: int, device) -> torch.Tensor:
    """[tokens]: each flattened token's segment (a sequence, or a row's tail) from `cu_seq_lens` (no host sync)."""
    ends = cu_seq_lens.to(device, torch.long, non_blocking=True)[1:]
    return torch.searchsorted(ends, torch.arange(tokens, device=device), right=True)


_MEMOS: list[OncePerForward] = []
_open_forwards: contextvars.ContextVar[int] = contextvars.ContextVar("turbotrain_packed_forwards", default=0)


def forward_begins() -> None:
    """A packed forward begins (AttentionSwitch.mark_packed): memos keep answers until it ends. Every memo forgets
    first, so nothing outlives a forward whose end was missed."""
    _forget_all()
    _open_forwards.set(_open_forwards.get() + 1)


def forward_ends() -> None:
    """A packed forward of this context ended (in any order: counted, not reset to a token's value): every memo
    forgets its answer (nothing is held between steps)."""
    _open_forwards.set(max(_open_forwards.get() - 1, 0))
    _forget_all()


def _forget_all() -> None:
    for memo in _MEMOS:
        memo.forget()


class OncePerForward:
    """`make(*args)`, remembered within one packed forward while the tensors among `args` are the same objects,
    unmodified: every layer hands its attention the same `cu_seq_lens` and `order`, so a mask derived from them is
    built once a forward, not once a layer (about ten small kernels a layer for the row mask: 24 layers at
    Qwen2.5-0.5B's depth). Forgotten when a forward begins and when it ends, so nothing is held between steps;
    outside a packed forward of this context (a checkpointed layer recomputed in the backward), while compiling,
    and for tensors without storage or version (fake, inference) each call makes its own. The key's tensors are
    held meanwhile, so no new tensor can take their id or memory; an answer changed in place is made again."""

    def __init__(self, make):
        self.make = make
        self.entry: tuple | None = None  # (key, answer, its version, the key's tensors): swapped whole
        _MEMOS.append(self)

    @property
    def answer(self):
        return None if self.entry is None else self.entry[1]

    def forget(self) -> None:
        self.entry = None

    def __call__(self, *args):
        if not _open_forwards.get() or torch.compiler.is_compiling():
            return self.make(*args)
        try:
            key = tuple((id(a), a._version, a.data_ptr(), a.device) if isinstance(a, torch.Tensor) else a for a in args)
        except RuntimeError:  # a tensor without storage (fake) or version counter (inference)
            return self.make(*args)
        entry = self.entry
        if entry is not None and entry[0] == key and entry[1]._version == entry[2]:
            return entry[1]
        answer = self.make(*args)
        self.entry = (key, answer, answer._version, args)
        return answer


@OncePerForward
def real_token_mask(order: torch.Tensor, tokens: int, device) -> torch.Tensor:
    """[tokens] bool: which flattened positions hold a sequence's token (`order`: the real ones), not a row's tail."""
    return torch.zeros(tokens, dtype=torch.bool, device=device).index_fill_(0, order, True)


def real_tokens_only(out: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """`out` [R * C, ...] with every token outside the sequences (`order`: the real ones) zeroed (rows' tails)."""
    real = real_token_mask(order, out.shape[0], out.device)
    return torch.where(real.view(-1, *[1] * (out.dim() - 1)), out, out.new_zeros(()))


def sequence_metadata(segments: torch.Tensor, lengths: torch.Tensor, starts: torch.Tensor) -> dict:
    """The batch keys above for packed rows: `segments` [R, C] (the packer's segment of each token), `lengths`
    [B] and `starts` [B] (each sequence's length and first token in the flattened rows)."""
    flat = segments.reshape(-1)
    boundary = torch.ones_like(flat, dtype=torch.bool)
    boundary[1:] = flat[1:] != flat[:-1]
    boundary[:: segments.shape[1]] = True  # a row's first token always opens a segment
    cu_seq_lens = torch.cat([boundary.nonzero().squeeze(1), torch.tensor([flat.numel()])]).to(torch.int32)
    longest = int((cu_seq_lens[1:] - cu_seq_lens[:-1]).max())
    order, groups = [], []
    for length in sorted(set(lengths.tolist()) - {0}):
        chosen = starts[lengths == length]  # [count], batch order
        order.append((chosen[:, None] + torch.arange(length)).reshape(-1))
        groups.append((int(chosen.numel()), int(length)))
    return {
        **dict.fromkeys(CU_SEQ_LENS, cu_seq_lens),
        **dict.fromkeys(MAX_LENGTHS, longest),
        PACKED_SEQUENCES: PackedSequences(
            torch.cat(order) if order else torch.zeros(0, dtype=torch.long), tuple(groups)
        ),
    }
