"""FLOPs of a training step on the work actually executed, and MFU against a measured matmul peak.

The formula (per optimizer step, forward + backward; the backward is counted as twice the forward):

    FLOPs = 6 · N_body · T_body            dense parts: every matmul weight outside the embeddings and the head
          + 6 · N_head · R_head            the output head (vocabulary projection) on the rows it runs on
          + 12 · L · h · S_attn            attention scores and values (QKᵀ and A·V, 2·h·T² each, forward)
          − 2 · (F_body · T_body + F_head · R_head)   frozen weights (LoRA's base): no weight gradient

* N_body: parameters of the model outside every `nn.Embedding` (token, position, type tables: lookups, no
  matmul) and outside the output embedding (`get_output_embeddings()`, tied or not). Norms and biases
  are included (a <1% overcount, as in nanoGPT's 6·N).
* N_head: the output embedding's weight and bias (h · V for a vocabulary head).
* F_body, F_head: the frozen part of each (parameters that need no gradient): their backward computes the
  input's gradient only (2 FLOPs per weight and token, not 4), so a LoRA step counts 4 · N, not 6 · N.
* T_body: tokens the body runs on: the padded batch (B·T), or only the real tokens with padding-free
  packing (packing's own leftover padding, ~11% of a packed row, is not counted).
* R_head: rows the head runs on: every body token in a stock model (Transformers computes logits on
  every position), the labelled rows (label ≠ -100) with label sparsity.
* S_attn: Σ T_row² over the batch's rows (B·T² padded; each sequence's own length² packed). Causal
  attention is counted as the full square, as nanoGPT and PaLM count it (a causal kernel may skip half).
* L, h: layers and hidden size from the model's config.

Embedding lookups, softmax, norms, activations, cross-entropy and the optimizer are not counted: MFU
is the share of the step that does matmul work at the measured matmul peak (`peak.py`), so what is
left to win is 1 − MFU spent outside the matmuls or in slow ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from turbotrain.modeling import IGNORE_INDEX, unwrap


@dataclass(frozen=True)
class ModelFlops:
    """The sizes the formula needs, read once from a model."""

    body_params: int
    head_params: int
    layers: int
    hidden: int
    frozen_body_params: int = 0
    frozen_head_params: int = 0

    @classmethod
    def of(cls, model: nn.Module) -> ModelFlops:
        inner = unwrap(model)
        head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
        skipped = {id(p) for m in inner.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
        head_parameters = list(head.parameters()) if head is not None else []
        head_ids = {id(p) for p in head_parameters}
        body = [p for p in inner.parameters() if id(p) not in skipped | head_ids]
        config = inner.config
        return cls(
            body_params=sum(p.numel() for p in body),
            head_params=sum(p.numel() for p in head_parameters),
            layers=int(config.num_hidden_layers),
            hidden=int(config.hidden_size),
            frozen_body_params=sum(p.numel() for p in body if not p.requires_grad),
            frozen_head_params=sum(p.numel() for p in head_parameters if not p.requires_grad),
        )


@dataclass(frozen=True)
class StepWork:
    """What one step executed: body tokens, head rows and Σ row-length² of attention."""

    body_tokens: int
    head_rows: int
    attention_square: int

    def __add__(self, other: StepWork) -> StepWork:
        return StepWork(
            self.body_tokens + other.body_tokens,
            self.head_rows + other.head_rows,
            self.attention_square + other.attention_square,
        )


def batch_work(batch: dict, *, packed: bool, sparse_head: bool, causal: bool) -> StepWork:
    """The work a padded batch `{input_ids [B, T], attention_mask?, labels?}` makes a model execute.

    `packed`: padding-free packing runs only the real tokens; `sparse_head`: label sparsity runs the head
    on the labelled rows only (after the one-token shift for causal LMs, as Trainer's loss makes).
    """
    input_ids = batch["input_ids"]
    mask = batch.get("attention_mask")
    lengths = mask.sum(dim=1) if mask is not None else torch.full((input_ids.shape[0],), input_ids.shape[1])
    rows, width = input_ids.shape
    tokens = int(lengths.sum()) if packed else rows * width
    square = int((lengths.long() ** 2).sum()) if packed else rows * width * width
    head_rows = tokens
    labels = batch.get("labels")
    if sparse_head and labels is not None and labels.dim() == 2:
        kept = labels[:, 1:] if causal else labels
        head_rows = int((kept != IGNORE_INDEX).sum())
    return StepWork(tokens, head_rows, square)


def step_flops(model: ModelFlops, work: StepWork) -> float:
    """FLOPs of forward + backward for `work` (the formula of the module docstring)."""
    return (
        (6.0 * model.body_params - 2.0 * model.frozen_body_params) * work.body_tokens
        + (6.0 * model.head_params - 2.0 * model.frozen_head_params) * work.head_rows
        + 12.0 * model.layers * model.hidden * work.attention_square
    )


def mfu(flops: float, seconds: float, peak_flops_per_s: float) -> tuple[float, float]:
    """(achieved FLOP/s, share of the peak) for `flops` done in `seconds`."""
    achieved = flops / seconds if seconds > 0 else 0.0
    return achieved, achieved / peak_flops_per_s if peak_flops_per_s > 0 else 0.0


def run_line(
    model: nn.Module,
    *,
    tokens: int,
    seq_len: int,
    seconds: float,
    head_rows: int | None = None,
    bf16: bool = False,
    device: str | torch.device = "cpu",
) -> str:
    """MFU of a whole training run on fixed blocks of `seq_len` (the main job's line): measures the peak
    now (~1 s), counts `tokens` through the body, `head_rows` (default: all tokens) through the head."""
    from turbotrain.measure.peak import matmul_peak

    work = StepWork(tokens, tokens if head_rows is None else head_rows, tokens * seq_len)  # rows·T² = tokens·T
    peak = matmul_peak(torch.bfloat16 if bf16 else torch.float32, device)
    return describe(step_flops(ModelFlops.of(model), work), seconds, peak.flops_per_s, peak.dtype)


def describe(flops: float, seconds: float, peak_flops_per_s: float, dtype: str) -> str:
    """One line for a log or a console: 'achieved 41.2 GFLOP/s = 48% of the measured fp32 matmul peak (85.9)'."""
    achieved, share = mfu(flops, seconds, peak_flops_per_s)
    return (
        f"achieved {achieved / 1e9:,.1f} GFLOP/s = {share:.0%} MFU of the measured {dtype} matmul peak "
        f"({peak_flops_per_s / 1e9:,.1f} GFLOP/s)"
    )
