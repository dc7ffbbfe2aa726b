"""TRL's `fused_lm_head=True` calls, answered by label sparsity's kept rows and the chunked head.

TRL 1.16's `SFTTrainer` patches the model's forward (`trl.trainer.utils.add_fused_lm_head`) and calls
`model(**batch, fused_lm_head=True)`; that forward runs the backbone, then TRL's own chunked log-prob
kernel over the head, and returns per-token `log_probs`, `entropy`, `is_top1` and `label_mask`
[B, T - 1] (zero where the label is -100; [B, T] with `shift_labels`), from which TRL makes the loss
(-Σ log_probs / num_items) and its `entropy` and `mean_token_accuracy` metrics. On a device without
Triton TRL scores every position, prompt and padding included.

Composed here: the call goes through the model's ordinary forward with the labels taken off (no
logits built), the chunked head (passes/chunked_ce/) computes each kept row's NLL, entropy and arg-max
match, and the answer TRL reads is rebuilt at its shape: the per-row values scattered back to the
positions they came from, zeros elsewhere, `label_mask` = target != -100, `loss` as TRL's forward
computes it. Same numbers as TRL's kernel (both are an fp32 log-softmax of the same logits).
The gradient reaches the model through `log_probs` (TRL's loss is their sum times one factor, which
the chunked head's pre-summed weight gradient requires).

Composed for a trainer whose weighting of the per-token log-probabilities is known (the trainer asks for
it: `trl_boundary.py: fused_call_weighting`):
* `EQUAL`: `turbo(SFTTrainer)` with `loss_type="nll"`, one weight for every token: the chunked head's op
  with dW summed in the forward (passes/chunked_ce/);
* `PER_ROW`: `turbo(DPOTrainer)` (without WPO's `use_weighting`, which reads `log_sum_sq_probs`): any weight
  per token (DPO's per-sequence factor, `ld_alpha`); the op of chunked_ce/logprobs.py, whose backward
  recomputes each chunk's logits for a trainable head, and which also gives TRL's `mean_logits`;
  `turbo(KTOTrainer)` the same (DPO's calls and outputs, TRL 1.16: integrations/trl/);
  `turbo(GRPOTrainer)` and `turbo(RLOOTrainer)` the same (TRL 1.16, without an entropy bonus or
  `cast_lm_head_to_fp32`: integrations/trl/): their fused head divides the logits by the
  sampling temperature, which the op applies as TRL's kernel does (`ChunkedHead.temperature`, set by the
  trainer: trl_boundary.fused_call_temperature); they read `log_probs` and `entropy` (without gradient: their
  loss takes none through the entropy unless GRPO's entropy bonus is on, which steps aside). GRPO weights
  each token by its own factor, RLOO each sequence's summed log-probs by one (its KL enters the reward).
Only the scored rows (labels != -100: completion tokens) reach the head in either case; TRL's CPU kernel
scores every position. On an accelerator the scored rows are projected by TRL's own (Triton) kernel instead
where it measured faster (chunked_ce/head_choice.py). A temperature other than 1 with the `EQUAL` op steps aside. The separate reference
model of DPOTrainer, KTOTrainer, GRPOTrainer and RLOOTrainer gets the same answer (passes/label_sparsity/reference_calls.py:
no gradient, log-probs only, as TRL's reference head returns).
Stepped aside (TRL's own forward runs, one log line; a trainer whose weighting is unknown gets no label
sparsity at all, and the summary says why: trl_boundary.unanswered_token_scores): every other caller (KTO, GRPO
and RLOO as above; `loss_type="dft"`; a model given `optimize()` and handed to TRL), chunked
cross-entropy set to "never", MoE router losses (`output_router_logits`), pre-shifted labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.utils import ModelOutput

from turbotrain.utils.warnings import log_once

FLAG = "fused_lm_head"  # the keyword of TRL's fused calls
EQUAL = "equal"  # every token's log-probability weighted alike: dW may be summed in the forward
PER_ROW = "per_row"  # any weight per token: the weight gradient waits for the backward
WEIGHTINGS = (EQUAL, PER_ROW)


def weighting_of(value: bool | str | None) -> str | None:
    """The weighting a `fused_head_calls` option names: None (not composed), EQUAL (True) or PER_ROW."""
    if value is None or value is False:
        return None
    if value is True:
        return EQUAL
    if value not in WEIGHTINGS:
        raise ValueError(f"fused_head_calls must be a bool or one of {', '.join(WEIGHTINGS)}, got {value!r}")
    return value


def is_fused_call(kwargs: dict) -> bool:
    return bool(kwargs.get(FLAG))


def can_compose(kwargs: dict, fused_loss) -> bool:
    """Whether this fused call can be answered by the chunked head (else TRL's own forward runs)."""
    reason = None
    if fused_loss is None or fused_loss.mode == "never":
        reason = "chunked cross-entropy is off"
    elif not fused_loss.compose_fused_calls:
        reason = (
            "the trainer's weighting of the log-probabilities is not known to turbotrain (SFTTrainer with "
            "loss_type='nll', DPOTrainer, GRPOTrainer and RLOOTrainer are)"
        )
    elif fused_loss.temperature != 1.0 and fused_loss.fused_weighting != PER_ROW:
        reason = "the logits are divided by a temperature, which only the per-row op applies"
    elif kwargs.get("output_router_logits"):
        reason = "MoE router losses are requested"
    elif kwargs.get("shift_labels") is not None:
        reason = "the labels come pre-shifted (context or sequence parallelism)"
    if reason is not None:
        log_once(
            f"turbotrain: TRL's fused LM head runs as TRL wrote it ({reason}); label sparsity steps aside "
            "for these calls"
        )
    return reason is None


def strip(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if k != FLAG}


def fused_output(call, loss: torch.Tensor):
    """TRL's `FusedCausalLMOutput` for this call: per-row values scattered to [B, T], cut to [B, T - 1]."""
    rows, targets = call.fused  # [K] positions in the flattened [B * T]; [B, T] shifted targets
    batch, length = targets.shape
    pre_shifted = False

    def spread(values: torch.Tensor | None) -> torch.Tensor | None:  # [K] -> [B, T] (or [B, T - 1])
        if values is None:  # a statistic not computed (a reference model's call), None as in TRL's output
            return None
        flat = values.new_zeros(batch * length).index_copy(0, rows, values)
        full = flat.view(batch, length)
        return full if pre_shifted else full[:, :-1]

    label_mask = targets != -100
    fields = {"mean_logits": spread(call.mean_logits)} if call.mean_logits is not None else {}
    return fused_output_class()(
        loss=loss,
        log_probs=spread(-call.nll),
        entropy=spread(call.entropy),
        is_top1=spread(call.is_top1),
        label_mask=label_mask if pre_shifted else label_mask[:, :-1],
        **fields,
    )


def fused_output_class() -> type:
    """The class of a `fused_lm_head` call's output: TRL's own, or the same fields on a ModelOutput."""
    try:
        from trl.trainer.utils import FusedCausalLMOutput
    except ImportError:  # an older or newer TRL: the same fields on a plain ModelOutput
        return FusedOutput
    return FusedCausalLMOutput


@dataclass
class FusedOutput(ModelOutput):
    loss: torch.Tensor | None = None
    log_probs: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    mean_logits: torch.Tensor | None = None
    is_top1: torch.Tensor | None = None
    label_mask: torch.Tensor | None = None
    aux_loss: torch.Tensor | None = None
