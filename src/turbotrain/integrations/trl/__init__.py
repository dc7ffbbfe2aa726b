"""TRL's trainers, one row each: what each one's loss computes, read by the trainer (`trainer_facts`: the
`TrainerFacts` handed to the passes), `turbotrain run` (launch/patch.py), the ready names (ready.py) and the
benchmark workloads (`classes`). A new TRL trainer is one row here and its test.

Per row: `weighting` of its `fused_lm_head` calls' log-probs, for the chunked head to answer them
(passes/fused_head_calls.py): "equal" (SFT, `loss_type="nll"`: -Σ log_probs / n), "per_row" (DPO, KTO: each
sequence's summed log-probs by its own factor; GRPO per token, RLOO per sequence, at the sampling temperature:
`sampling_temperature`); `sums_tokens` (SFT): padding-free packs its batches; `packs_scored_calls`: each call's
rows are one block of real tokens, packed inside the call (passes/padding_free/scored_calls.py);
`reference_model`: its own `ref_model` (full fine-tuning), answered too; `releases`: the TRL releases its calls
were checked against (empty: any); `refusal(trainer)`: a setting under which its calls are not answered (Liger's
loss in a TRL release other than 1.16, WPO's weighting, GRPO's entropy bonus, which takes a gradient through the entropy the chunked op returns
without one, `cast_lm_head_to_fp32`). A TRL trainer whose calls are not answered (another release, a refusal,
ORPO and every trainer not in the table) scores its tokens itself: label sparsity is refused for it, with why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformers import Trainer

from turbotrain.boundaries import trl_boundary
from turbotrain.integrations.trl.arguments import as_sft_config
from turbotrain.passes.registry import TrainerFacts
from turbotrain.trainer import register_integration


def _liger(trainer) -> str | None:
    """TRL 1.16's trainers turn Liger's fused loss off and keep their fused LM head (Liger's layer kernels only), so
    their calls are answered as without Liger (what Liger does replace, the passes see: boundaries/liger_boundary.py);
    another release may compute the loss with Liger's own."""
    if not getattr(trainer.args, "use_liger_kernel", False):
        return None
    version = trl_boundary.trl_version()
    if version.startswith(CHECKED):
        return None
    return f"Liger's kernels are on, and TRL {version} is not a release turbotrain checked them with (1.16)"


def _sft_refusal(trainer) -> str | None:
    loss = getattr(trainer.args, "loss_type", "nll")
    return None if loss == "nll" else f"loss_type={loss!r} weights tokens otherwise"


def _dpo_refusal(trainer) -> str | None:
    return "WPO's use_weighting is on" if getattr(trainer, "use_weighting", False) else _liger(trainer)


def _rl_refusal(trainer) -> str | None:
    """RLOOConfig has no entropy bonus or `cast_lm_head_to_fp32`: those settings read as off for it."""
    args = trainer.args
    if getattr(args, "entropy_coef", 0.0) != 0.0 or getattr(args, "use_adaptive_entropy", False):
        return "its entropy bonus takes a gradient through the entropy, which turbotrain's op returns without one"
    if getattr(args, "cast_lm_head_to_fp32", False):
        return "cast_lm_head_to_fp32 replaces the head's forward"
    return _liger(trainer)


@dataclass(frozen=True)
class TrlTrainer:
    """One TRL trainer turbotrain knows (the module docstring says what each field means)."""

    name: str  # "DPO": TRL's DPOTrainer and DPOConfig
    weighting: str
    refusal: Callable[[object], str | None]
    sums_tokens: bool = False
    packs_scored_calls: bool = True
    reference_model: bool = True
    sampling_temperature: bool = False
    releases: tuple[str, ...] = ()

    @property
    def trainer(self) -> str:
        return f"{self.name}Trainer"

    @property
    def config(self) -> str:
        return f"{self.name}Config"

    @property
    def modules(self) -> dict[str, str]:
        """TRL's classes by name -> the module that defines them (`turbotrain run` patches them)."""
        package = f"trl.trainer.{self.name.lower()}"
        return {self.trainer: f"{package}_trainer", self.config: f"{package}_config"}

    def why_unanswered(self, trainer) -> str | None:
        """Why turbotrain does not answer this trainer's fused calls, or None."""
        version = trl_boundary.trl_version()
        if self.releases and not version.startswith(self.releases):
            return f"TRL {version} is not a release turbotrain checked {self.trainer}'s calls against (1.16)"
        return self.refusal(trainer)


CHECKED = ("1.16.",)
TRAINERS = (
    TrlTrainer("SFT", "equal", _sft_refusal, sums_tokens=True, packs_scored_calls=False, reference_model=False),
    TrlTrainer("DPO", "per_row", _dpo_refusal),
    TrlTrainer("KTO", "per_row", _liger, releases=CHECKED),
    TrlTrainer("GRPO", "per_row", _rl_refusal, sampling_temperature=True, releases=CHECKED),
    TrlTrainer("RLOO", "per_row", _rl_refusal, sampling_temperature=True, releases=CHECKED),
)


def row_of(trainer) -> TrlTrainer | None:
    """The row of the TRL trainer `trainer` (an instance or a class) is or derives from, or None."""
    return next((row for row in TRAINERS if trl_boundary.derives_from(trainer, row.trainer)), None)


def classes(name: str, feature: str) -> tuple[type, type]:
    """(TRL's config class, trainer class) of row `name` ("DPO"); an ImportError naming the llm extra without TRL."""
    return trl_boundary.public_classes((f"{name}Config", f"{name}Trainer"), feature)


def trainer_facts(trainer) -> TrainerFacts | None:
    """What `trainer`'s loss asks of the passes, from its row; None for a trainer that is not TRL's."""
    name = trl_boundary.trl_trainer_name(trainer)
    if name is None:
        return None
    row = row_of(trainer)
    why = row.why_unanswered(trainer) if row is not None else None
    weighting = row.weighting if row is not None and why is None else None
    refusals = {}
    if weighting is None and not (row is not None and row.sums_tokens):
        refusals["label_sparsity"] = (
            f"TRL's {name} scores its tokens itself (its fused LM head or its own log-softmax), which turbotrain does "
            f"not answer for this trainer{f' ({why})' if why else ''}: TRL's computation runs"
        )
    own_loss = type(trainer).compute_loss is Trainer.compute_loss
    return TrainerFacts(
        sums_tokens=own_loss or (row is not None and row.sums_tokens),
        fused_call_weighting=weighting,
        fused_call_temperature=float(trainer.args.temperature) if row and row.sampling_temperature else 1.0,
        packs_scored_calls=weighting is not None and row.packs_scored_calls,
        reference_model=trl_boundary.reference_model(trainer) if weighting and row.reference_model else None,
        refusals=refusals,
    )


def mixins(trainer_class: type) -> tuple[type, ...]:
    """What goes before TurboMixin in `turbo(trainer_class)`: SFTTrainer's own `compute_loss` counts `num_tokens`
    on the attention mask, corrected to a packed batch's real tokens (trl_boundary.TrlTokenCount)."""
    return (trl_boundary.TrlTokenCount,) if trl_boundary.counts_tokens_from_mask(trainer_class) else ()


register_integration(trainer_facts, mixins, as_sft_config)
