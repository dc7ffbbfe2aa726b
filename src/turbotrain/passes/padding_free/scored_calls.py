"""Padding-free inside TRL's scored calls: a padded `fused_lm_head` call run as one packed row.

Contract
--------
TRL's `DPOTrainer` and `KTOTrainer` (1.16) pad each batch's chosen and rejected rows, flush them left (each row's
real tokens first, its padding after: `trl.trainer.utils.flush_left`) and call the policy, then the reference
model, as `model(input_ids=, attention_mask=, labels=, use_cache=False, fused_lm_head=True)`. Their losses read
per-row sums of the per-token log-probabilities, so the batch cannot be packed before the call (padding-free's
collator step steps aside: `loss_reads_rows`). Inside the call it can. Label sparsity answers the call
(passes/fused_head_calls.py); with `PackedScoredCalls` on that answer, the call's real tokens [B, T] -> [1, N] run
through the model as one packed row: position ids restarting per row, no mask, each row attending within itself
through packed_attention.py's function. The head then reads the scored rows at their packed positions, and the
answer is scattered back to [B, T - 1] at the padded positions as before: TRL reads the same tensors, and the
body never computes the padding (33% of a DPO batch's positions at the issue's shape).

TRL's `GRPOTrainer` and `RLOOTrainer` make the same calls on left-padded prompts followed by right-padded
completions: each row's real tokens are one block there too, and are packed the same way.

Taken: keyword calls with `input_ids` and an `attention_mask` [B, T] whose ones form one block per row (right,
left or both sides padded), nothing else per token (`position_ids`, `inputs_embeds`, `token_type_ids`, images,
`logits_to_keep`, a cache: any other input that is not None leaves the call padded, said once in the log), at
least one real token. Each packed token keeps its index in its padded row as its position id: the position the
padded call gives it where the model counts positions along the row (Transformers' default without
`position_ids`), and, with rotary embeddings, the same relative positions in any case.

Exact: each row's tokens meet exactly the keys they met in the padded call, at the same positions, through the
model's own attention code (per length on the CPU, a varlen kernel on CUDA): fp32 outputs equal to float
summation order. Installed only where padding-free itself would pack the model (`refusal`: SDPA or eager
attention switchable at run time, no dropout or other random draws, nothing carried along a row, no reads under
the mask), then self-checked (`self_check`): padded and packed forwards of an uneven batch, right-padded and
left-padded, rows longer than any attention window, must agree at every real token (a model that counts
positions from the mask would fail the left-padded one).
Wasted: on an accelerator, two host syncs per call (the mask read to lay out the packed row, the scored rows
checked against it); none on a CPU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import nn

from turbotrain import modeling
from turbotrain.passes.installed import HookedPass
from turbotrain.passes.padding_free import packing_spec, refusal_of_model
from turbotrain.passes.padding_free.packed_attention import AttentionSwitch
from turbotrain.passes.padding_free.packed_sequences import CU_SEQ_LENS, MAX_LENGTHS, sequence_metadata
from turbotrain.passes.registry import Setup, register_variant
from turbotrain.passes.self_check import check_batch, forward_raises, never_raises
from turbotrain.utils.batch_keys import ATTENTION_SEQUENCES, PACKED_SEQUENCES
from turbotrain.utils.mode import training_mode
from turbotrain.utils.warnings import log_once

logger = logging.getLogger("turbotrain")

PACKED_INPUTS = ("input_ids", "attention_mask")
# keywords that may come with a scored call and do not depend on the token layout
LAYOUT_FREE = ("use_cache", "return_dict", "output_hidden_states", "output_attentions")
LONGEST_CHECKED_WINDOW = 1024  # the self-check's rows outgrow every window; longer windows are not checked here


@dataclass(frozen=True)
class PackedLayout:
    """Where a padded call's real tokens go in one packed row, laid out on the host from the mask: `index` [N]
    their flattened padded positions and `positions` [N] each one's index in its padded row (the position stock
    gives it), both on the call's device; `where` [B * T] on the host, each padded position's place in the packed
    row (-1: padding); `metadata` the packed-attention keys (packed_sequences.py)."""

    index: torch.Tensor
    positions: torch.Tensor
    where: torch.Tensor
    metadata: dict

    @property
    def tokens(self) -> int:
        return self.index.numel()

    def packed_rows(self, rows: torch.Tensor) -> torch.Tensor | None:
        """`rows` [K] (flattened padded positions) as positions in the packed row; None if one is padding."""
        packed = self.where[rows.cpu()]  # rows are on the host already where label sparsity's collator chose them
        return None if bool((packed < 0).any()) else packed.to(self.index.device, non_blocking=True)

    def call(self, kwargs: dict) -> dict:
        """The call's keywords for the packed row."""
        ids = kwargs["input_ids"]
        packed = {k: v for k, v in kwargs.items() if k not in PACKED_INPUTS}
        packed["input_ids"] = ids.reshape(-1).index_select(0, self.index).unsqueeze(0)
        packed["position_ids"] = self.positions.unsqueeze(0)
        packed[ATTENTION_SEQUENCES] = self.metadata[PACKED_SEQUENCES].to(ids.device)
        for key in CU_SEQ_LENS:
            packed[key] = self.metadata[key].to(ids.device, non_blocking=True)
        for key in MAX_LENGTHS:
            packed[key] = self.metadata[key]
        if "use_cache" in kwargs:
            packed["use_cache"] = False
        return packed


def layout_of(args: tuple, kwargs: dict) -> tuple[PackedLayout | None, str | None]:
    """(the packed layout of this call, None), or (None, why it stays padded). Reads the mask once on the host
    (the call's one host sync for its layout; none on a CPU)."""
    ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
    if args or ids is None or mask is None or ids.dim() != 2 or mask.shape != ids.shape:
        return None, "it does not give input_ids and an attention_mask [batch, length] by keyword"
    others = [k for k, v in kwargs.items() if v is not None and k not in PACKED_INPUTS + LAYOUT_FREE]
    if others:
        return None, f"it gives other inputs ({', '.join(sorted(others))})"
    real = mask.cpu().bool()
    opened = real[:, :1].sum(dim=1) + (real[:, 1:] & ~real[:, :-1]).sum(dim=1)  # blocks of real tokens per row
    if bool((opened > 1).any()):
        return None, "a row's real tokens are not one block (a window would count the padding between them)"
    index = real.reshape(-1).nonzero().squeeze(1)
    if index.numel() == 0:
        return None, "it has no real token"
    lengths = real.sum(dim=1)
    starts = torch.cumsum(lengths, 0) - lengths
    segments = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    where = torch.full((real.numel(),), -1, dtype=torch.long)
    where[index] = torch.arange(index.numel())
    device = ids.device
    return PackedLayout(
        index.to(device, non_blocking=True),
        (index % real.shape[1]).to(device, non_blocking=True),
        where,
        sequence_metadata(segments.unsqueeze(0), lengths, starts),
    ), None


class PackedScoredCalls(HookedPass):
    """Packs the scored calls label sparsity answers on `model` (module docstring). Label sparsity calls `pack`
    in its pre-hook and `finish` in its forward hook; `remove` switches the model's attention back."""

    label = "padding_free (inside scored calls)"  # the summary's name for it

    def __init__(self, model: nn.Module, switch: AttentionSwitch):
        super().__init__()
        self.model, self.switch = model, switch

    def collator(self, inner):
        return inner  # the batches stay padded: each call is packed inside the model

    def pack(self, args: tuple, kwargs: dict, rows: torch.Tensor) -> tuple[dict, torch.Tensor, int] | None:
        """(the packed call's keywords, `rows` in the packed row, its token count), or None to stay padded."""
        layout, why = layout_of(args, kwargs)
        packed_rows = layout.packed_rows(rows) if layout is not None else None
        if layout is not None and packed_rows is None:
            why = "it scores a padding position"
        if why is None and not self.switch.follow():
            why = "the model's attention was switched to one the packed row cannot use"
        if why is not None:
            log_once(f"turbotrain: padding-free leaves a scored call padded: {why}")
            return None
        self.switch.mark_packed()
        return layout.call(kwargs), packed_rows, layout.tokens

    def finish(self) -> None:
        """The call ended: its packed forward, where it had one, is no longer open (`unmark` of none: nothing)."""
        self.switch.unmark()

    def end_forward(self) -> None:
        """Drop what a call that raised left open (AttentionSwitch.end_open_forwards)."""
        self.switch.end_open_forwards()

    def remove(self) -> None:
        super().remove()
        self.switch.restore()


def refusal(model: nn.Module, probe: bool = True) -> str | None:
    """Why a model's scored calls cannot be packed exactly (padding-free's own refusals), or None; `probe=False`
    for a model the policy's forward probes stand for (padding_free.refusal_of_model)."""
    if not modeling.is_causal_lm(model):
        return "it is not a causal LM"
    spans = modeling.attention_spans(model)
    if spans and max(spans) > LONGEST_CHECKED_WINDOW:
        return f"its attention window ({max(spans)} tokens) is longer than the self-check's rows"
    return refusal_of_model(model, packing_spec(model), probe)


@never_raises
def self_check(model: nn.Module, packer: PackedScoredCalls) -> str | None:
    """Padded and packed forwards of an uneven batch, right-padded then left-padded, agree at every real token (the
    body's last hidden states: no [tokens, vocabulary] logits), or why not. Rows outgrow every attention window."""
    longest = max(modeling.attention_spans(model), default=0) + 7
    batch, problem = check_batch(model, [longest, 5, longest - 3], seed=4321)
    if problem is not None:
        return problem
    right = {k: batch[k] for k in PACKED_INPUTS}
    shifts = right["attention_mask"].shape[1] - right["attention_mask"].sum(dim=1)
    left = {k: torch.stack([row.roll(int(n)) for row, n in zip(v, shifts)]) for k, v in right.items()}
    return _compare(model, packer, right, "right") or _compare(model, packer, left, "left")


def _compare(model: nn.Module, packer: PackedScoredCalls, call: dict, side: str) -> str | None:
    layout, why = layout_of((), call)
    if layout is None:
        return f"the check's {side}-padded batch was not packed: {why}"
    body = modeling.unwrap(model).base_model
    with forward_raises("packed forward"), training_mode(model, False), torch.no_grad():
        padded = body(**call).last_hidden_state
        packer.switch.mark_packed()
        try:
            packed = body(**layout.call(call)).last_hidden_state
        finally:
            packer.switch.unmark()
    tokens = tuple(call["attention_mask"].shape)
    if padded.dim() != 3 or padded.shape[:2] != tokens or tuple(packed.shape[:-1]) != (1, layout.tokens):
        shapes = f"{tuple(padded.shape)} padded, {tuple(packed.shape)} packed"
        return f"the body's hidden states ({shapes}) do not line up with the call's tokens {tokens}"
    expected = padded.reshape(-1, padded.shape[-1]).index_select(0, layout.index).float()
    got = packed[0].float()
    tolerance = 1e-4 if padded.dtype == torch.float32 else 2e-2
    worst = (got - expected).abs().max() / expected.abs().max().clamp_min(1e-12)
    if not bool(worst <= tolerance):
        return f"packed hidden states differ from {side}-padded ones by {float(worst):.2e} of their scale"
    return None


def pack_scored_calls(model: nn.Module, check: bool = True) -> tuple[PackedScoredCalls | None, str | None]:
    """(the installed packer, None), or (None, why `model`'s scored calls stay padded). `check=False`: `model` has
    the class and configuration of a model already checked (the policy, for its reference model), so neither the
    self-check nor the refusals' forward probes run on it (they would read every weight before training does)."""
    problem = refusal(model, probe=check)
    if problem is not None:
        return None, problem
    switch, problem = AttentionSwitch.apply(model)
    if switch is None:
        return None, problem
    packer = PackedScoredCalls(model, switch)
    problem = self_check(model, packer) if check else None
    if problem is not None:
        packer.remove()
        return None, problem
    return packer, None


def pack_answered_calls(model: nn.Module, setup: Setup) -> PackedScoredCalls | None:
    """Padding-free for a trainer whose loss reads rows but whose scored calls may be packed (`TrainerFacts.
    packs_scored_calls`: TRL's DPO, KTO, GRPO, RLOO): the calls label sparsity answers on `model` (installed before
    it, `setup.installed`) and on the trainer's reference model (its `reference`) packed inside each call; the
    packer (the summary names it), or None with why logged once."""
    sparsity = setup.installed.get("label_sparsity")
    chunked = sparsity.chunked_head if sparsity is not None else None
    if chunked is None or chunked.fused_weighting is None:
        log_once("turbotrain: padding-free leaves the scored calls padded: label sparsity does not answer them")
        return None
    packer, why = pack_scored_calls(sparsity.model, check=setup.check)
    if packer is None:
        log_once(f"turbotrain: padding-free leaves the scored calls padded: {why}")
        return None
    sparsity.call_packer = packer
    reference = sparsity.reference
    if reference is not None:
        reference_packer, why = pack_scored_calls(reference.model, check=setup.check and reference.checked)
        if reference_packer is None:
            log_once(f"turbotrain: padding-free leaves the reference model's calls padded: {why}")
        reference.call_packer = reference_packer
    return packer


register_variant("padding_free", lambda facts: facts.packs_scored_calls, pack_answered_calls)
