"""Pack a padded batch into rows with no padding between sequences (the batch side of padding-free).

Input: a collated batch whose `attention_mask` [B, L] marks each sequence's tokens, right-padded. A batch
with a row of no real token (an empty row, or one of padding only) is returned unchanged: stock trains on it
(a row of loss 0), and a sequence of length 0 has no place in a packed row (its first token, where a causal
label is dropped and a classifier pools, would lie past its row).
A left-padded batch is returned unchanged (one warning): models with absolute positions (BERT, GPT-2)
number a left-padded sequence from its first pad, so packing it would change the numbers. So is a batch
whose rotary frequencies packing would change (`rope_rule`): stock computes them from the padded row's
length L, a packed row from its longest sequence, so a LongRoPE model (Phi-3) is packed only when both are
on the same side of its original limit, and a dynamic-NTK one only when L is below its limit (past it
the rescaled table depends on L and on earlier batches). Output, for `R` rows of capacity `C`, rounded up to
`multiple_of`: C = the longest sequence, except with the "sequences" mask (per-sequence attention, no C^2
cost per row), where the spec's `row_tokens` sets it: "auto" all of the batch's tokens in one row, an int
rows of that many tokens (at least the longest sequence), "longest" as the other modes:

* every per-token tensor [B, L] (input_ids, labels, token_type_ids, ...) becomes [R, C]; sequences are
  placed first-fit-decreasing (longest first, each into the first row with room), which fills rows
  to ~89% on the built-in corpus against ~76% for in-order filling. Order does not matter to the loss
  (a token-weighted sum) nor to pooled outputs (gathered per sequence, in batch order);
* `position_ids` [R, C]: restart at every sequence, plus `position_offset` (RoBERTa counts positions
  from padding_idx + 1);
* `attention_mask`, by the spec's `mask` (how the model is told where each sequence ends):
  - "block": [R, 1, C, C] bool, a token attends only to tokens of its own sequence (and, for causal
    models, only to earlier ones). The unused tail of a row is its own block, so no softmax row is
    empty. Every layer gets this one mask: right only for models whose layers share one rule;
  - "positions" and "layers": [R, C], 1 on real tokens and 0 on the tail (what stock's mask sums
    to). The model-side hook (padding_free/__init__.py) removes it before the model runs: with "positions"
    the model builds every layer's own mask (sliding window, chunks, its own overlays) from the
    restarting `position_ids`, as Transformers' `masking_utils` does for packed rows; with "layers"
    the hook builds one mask per layer type from the segment ids below;
  - "sequences": [R, C] as above, and the segment metadata of packed_sequences.py (`cu_seq_lens_q`, ...):
    the packed-attention function (packed_attention.py) attends within each sequence, no mask at all;
* labels: -100 on the tail; for causal models also on each sequence's first token, which the shifted
  loss would otherwise make the previous sequence's last token predict. Stock never scores that
  label either (it sits at position 0 of its padded row), so the loss is unchanged;
* per-sequence tensors [B] (classification labels) are kept, and `turbotrain_sequence_starts` [B]
  gives each sequence's first token as an index into the flattened [R * C] rows;
* `turbotrain_padded_labels`: the padded labels, so that Trainer counts `num_items_in_batch` on the
  very labels stock would see (its rule depends on the model's `loss_type`).
* `turbotrain_segments` [R, C]: which sequence (batch index) each token belongs to; the tail of row r
  is its own segment B + r;
* `turbotrain_padded_mask` [B, L]: the padded attention mask, on which Trainer counts `num_input_tokens_seen`
  and `total_flos` as stock does, and trainers that count tokens from the mask count them (TRL's `num_tokens`).
The `turbotrain_` keys are removed by the model-side hook before the model runs.

Waste: only each row's tail, under one sequence per row; stock dynamic padding wastes
B * L - sum(lengths). Attention inside a row is dense with a block-diagonal mask: (C^2 per row), with
the "block", "positions" and "layers" modes (the last two make theirs on the model's device); with
"sequences" it is sum(l_i^2), whatever the rows, so rows can hold the whole batch. Row length changes
nothing in the loss: it is a sum over tokens, each token sees its own sequence only, and
`num_items_in_batch` is counted on the padded labels.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from turbotrain.passes.padding_free.packed_sequences import sequence_metadata
from turbotrain.utils.batch_keys import (
    IGNORE_INDEX,
    PADDED_LABELS,
    PADDED_MASK,
    SEGMENTS,
    SEQUENCE_STARTS,
)
from turbotrain.utils.warnings import warn_once

logger = logging.getLogger("turbotrain")

MASK_MODES = ("block", "positions", "layers", "sequences")
ROW_TOKENS = ("auto", "longest")  # or an int: rows of that many tokens


@dataclass(frozen=True)
class PackingSpec:
    """What packing needs to know about the model."""

    causal: bool
    pad_token_id: int
    position_offset: int = 0
    multiple_of: int = 8
    shifted_labels: bool | None = None  # the loss predicts the next token (causal LM); None: same as `causal`
    mask: str = "block"  # how the packed rows' attention is masked: one of MASK_MODES (module docstring)
    rope_rule: tuple[str, int] | None = None  # ("longrope" | "dynamic", length limit): modeling.length_dependent_rope
    row_tokens: int | str = "longest"  # row capacity with the "sequences" mask: one of ROW_TOKENS or an int

    @property
    def shifts_labels(self) -> bool:
        return self.causal if self.shifted_labels is None else self.shifted_labels


def plan_rows(lengths: list[int], capacity: int) -> list[tuple[int, int]]:
    """(row, offset) of each sequence, first-fit-decreasing; a sequence never spans two rows."""
    placements: list[tuple[int, int]] = [(0, 0)] * len(lengths)
    used: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        row = next((r for r, taken in enumerate(used) if taken + lengths[index] <= capacity), len(used))
        if row == len(used):
            used.append(0)
        placements[index] = (row, used[row])
        used[row] += lengths[index]
    return placements


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def pack_batch(batch: dict, spec: PackingSpec, min_capacity: int = 0) -> dict:
    """The packed form of `batch` (see the module docstring). Padding-free batches come back unchanged.
    `min_capacity`: rows hold at least this many tokens (the self-check packs two long sequences in one)."""
    tokens = batch["attention_mask"].bool()
    if tokens.all() or not tokens.any(1).all():  # no padding; or a row of no token (trained padded, as stock does)
        return batch
    if (tokens[:, 1:] & ~tokens[:, :-1]).any():
        warn_once(
            "turbotrain: padding-free leaves left-padded batches padded (set the tokenizer's "
            "padding_side='right' to pack them)."
        )
        return batch
    batch_size, padded_length = tokens.shape
    lengths = tokens.sum(1)
    if not _same_rotary_table(spec.rope_rule, padded_length, int(lengths.max())):
        logger.info(
            "turbotrain: padding-free left a batch of length %d padded: packing would change its rotary table",
            padded_length,
        )
        return batch
    capacity = _round_up(max(_row_tokens(spec, lengths), min_capacity), spec.multiple_of)
    placements = plan_rows(lengths.tolist(), capacity)
    num_rows = max(row for row, _ in placements) + 1
    starts = torch.tensor([row * capacity + offset for row, offset in placements], dtype=torch.long)

    within = torch.arange(int(lengths.sum())) - torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
    destination = torch.repeat_interleave(starts, lengths) + within
    segment = torch.full((num_rows * capacity,), -1, dtype=torch.long)
    segment[destination] = torch.repeat_interleave(torch.arange(batch_size), lengths)
    tail = segment < 0
    segment[tail] = batch_size + torch.arange(num_rows * capacity)[tail] // capacity  # one block per row tail
    positions = torch.zeros(num_rows * capacity, dtype=torch.long)
    positions[destination] = within

    packed = {}
    for key, value in batch.items():
        if key == "attention_mask":
            continue
        if torch.is_tensor(value) and value.dim() >= 2 and tuple(value.shape[:2]) == tuple(tokens.shape):
            packed[key] = _scatter(value, tokens, destination, num_rows, capacity, _fill(key, spec))
        else:
            packed[key] = value
    if "labels" in packed and packed["labels"].dim() == 2:
        packed[PADDED_LABELS] = batch["labels"]
        if spec.shifts_labels:
            packed["labels"].view(-1)[starts] = IGNORE_INDEX
    packed["position_ids"] = (positions + spec.position_offset).view(num_rows, capacity)
    segments = segment.view(num_rows, capacity)
    if spec.mask == "block":
        packed["attention_mask"] = _block_mask(segments, spec.causal)
    else:
        packed["attention_mask"] = (~tail).long().view(num_rows, capacity)
    if spec.mask == "sequences":
        packed.update(sequence_metadata(segments, lengths, starts))
    packed[SEGMENTS] = segments
    packed[SEQUENCE_STARTS] = starts
    packed[PADDED_MASK] = batch["attention_mask"]
    return packed


def _row_tokens(spec: PackingSpec, lengths: torch.Tensor) -> int:
    """How many tokens a row holds before rounding (module docstring): the longest sequence at least."""
    longest = int(lengths.max())
    if spec.mask != "sequences" or spec.row_tokens == "longest":
        return longest
    if spec.row_tokens == "auto":
        return int(lengths.sum())
    return max(int(spec.row_tokens), longest)


def _same_rotary_table(rule: tuple[str, int] | None, padded_length: int, longest: int) -> bool:
    """Whether a packed row (largest position: the longest sequence's) gets stock's rotary frequencies (largest
    position: the padded row's)."""
    if rule is None:
        return True
    kind, limit = rule
    if kind == "longrope":
        return (padded_length > limit) == (longest > limit)
    return padded_length < limit


def _fill(key: str, spec: PackingSpec) -> int:
    """What the unused tail of a row holds: the pad token, ignored labels, zeros for anything else."""
    return {"input_ids": spec.pad_token_id, "labels": IGNORE_INDEX}.get(key, 0)


def _scatter(
    value: torch.Tensor, tokens: torch.Tensor, destination: torch.Tensor, rows: int, capacity: int, fill: int
) -> torch.Tensor:
    flat = value.new_full((rows * capacity, *value.shape[2:]), fill)
    flat[destination] = value[tokens]
    return flat.view(rows, capacity, *value.shape[2:])


def _block_mask(segment: torch.Tensor, causal: bool) -> torch.Tensor:
    """[R, 1, C, C] bool: True where query and key belong to the same sequence (and key <= query if causal)."""
    same = segment[:, :, None] == segment[:, None, :]
    if causal:
        capacity = segment.shape[1]
        same &= torch.ones(capacity, capacity, dtype=torch.bool).tril()
    return same[:, None]
