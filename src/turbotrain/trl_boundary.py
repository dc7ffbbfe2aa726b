"""The boundary with TRL: what turbotrain knows of TRL's trainers, keyed on TRL's public classes and attributes.

The trainer and the passes ask it, so it stands in the ground layer beside `hf_boundary.py` (tests/test_layers.py).

TRL is the `llm` extra. Nothing here imports it until asked for a TRL class, and the questions about a
trainer answer "no" while TRL is not imported (no class can derive from `SFTTrainer` before then).

* `is_sft_trainer(trainer)`: an instance or subclass of TRL's `SFTTrainer`. Its loss is a sum over the
  tokens (`sums_tokens`), so packing rows changes nothing: the trainer lets padding-free run for it
  (for other trainers that compute their own loss, it steps aside).
* `sums_log_probs(trainer)`: `SFTTrainer` with `args.loss_type == "nll"`, whose loss is -Σ log_probs / n,
  one weight for every token. `fused_call_weighting(trainer)`: how the trainer weights the log-probabilities
  of its `fused_lm_head` calls, for the chunked head to answer them (passes/fused_head_calls.py): "equal"
  (that SFTTrainer), "per_row" (`DPOTrainer` without WPO's `use_weighting` or Liger's loss: it reads
  `log_probs`, `entropy`, `mean_logits`, `is_top1` and weights each sequence by its own factor), else None.
  "per_row" too for the trainers that sample completions and score their tokens at the sampling temperature
  (`is_sampling_rl_trainer`: `GRPOTrainer` and `RLOOTrainer`, of the TRL releases they were checked against,
  `RL_RELEASES`): both read `log_probs` and `entropy` of logits divided by that temperature
  (`fused_call_temperature`) through the same `_get_per_token_logps_and_entropies`; GRPO weights each token by
  its own factor (advantage, clipping, KL), RLOO each sequence's summed log-probs by one (advantage, clipping;
  its KL enters the reward, from log-probs taken without gradient); the entropy is a metric in both. They step
  aside (`rl_refusal`, said in the summary) for another TRL release, an entropy bonus (GRPO's `entropy_coef`,
  `use_adaptive_entropy`: its gradient flows through the entropy, which the chunked op returns without one),
  `cast_lm_head_to_fp32` (GRPO: TRL replaces the head's forward) and Liger. "per_row" too for `KTOTrainer`
  (`KTO_RELEASES`; `kto_refusal`: another release, Liger): DPO's calls and outputs, each sequence's summed
  log-probs weighted by its own factor (the KL pairs' and the reference's calls under `no_grad`).
  `unanswered_token_scores(trainer)`: why label sparsity has nothing to act on in a TRL trainer whose calls
  are not answered (ORPO; DPO with WPO or Liger; KTO, GRPO and RLOO as above), for the summary to say so.
  `separate_reference_model(trainer)`: the `ref_model` of DPOTrainer, KTOTrainer, GRPOTrainer or RLOOTrainer where
  turbotrain may answer its calls too.
  `FUSED_LM_HEAD` is that call's flag, `fused_output_class()` the output TRL reads (`trl.trainer.utils.FusedCausalLMOutput`, or the same fields on a plain `ModelOutput` where a
  TRL release has no such class).
* `TrlTokenCount`, placed before a trainer class whose `compute_loss` is `SFTTrainer`'s own
  (`counts_tokens_from_mask`): `SFTTrainer` adds `inputs["attention_mask"].sum()` to its `num_tokens`
  metric; a packed batch's mask is the [R, 1, C, C] block mask, so the count is corrected to the real
  tokens the packer recorded (`batch_keys.REAL_TOKENS`). It writes the metric's state, which TRL keeps in
  private attributes (`TRL_PRIVATE_ATTRIBUTES`, pinned by tests/test_trl_boundary.py): the one place
  turbotrain touches a private TRL name.
* `sft_classes(feature)`, `dpo_classes(feature)`, `kto_classes(feature)`, `grpo_classes(feature)`: TRL's `SFTConfig` and `SFTTrainer`
  (`DPOConfig`, `DPOTrainer`; `GRPOConfig`, `GRPOTrainer`), or an ImportError naming the extra.
* `note_grpo_generations(trainer, noted)`: the benchmark's clock on a GRPOTrainer's generation (tokenizing the
  prompts, sampling, decoding: TRL's `_generate`, `GRPO_GENERATION`, pinned by tests/test_trl_boundary.py), so
  that the optimisation part of a step can be timed apart from it; wraps the instance's method, changes nothing.
* TRL's rebuild of turbo arguments: `trl_arguments.py` (it needs `args`, a layer above this module).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.utils import ModelOutput

from turbotrain.batch_keys import REAL_TOKENS
from turbotrain.utils.imports import require

FUSED_LM_HEAD = "fused_lm_head"
# TRL releases whose GRPOTrainer's and RLOOTrainer's fused calls were checked (tests/llm/test_trl_grpo.py, _rloo.py)
RL_RELEASES = ("1.16.",)
SAMPLING_RL_TRAINERS = ("GRPOTrainer", "RLOOTrainer")
# TRL releases whose KTOTrainer's fused calls were checked (tests/llm/test_trl_more_trainers.py)
KTO_RELEASES = ("1.16.",)
TRL_PRIVATE_ATTRIBUTES = ("_total_train_tokens", "_metrics", "_tp_size")
GRPO_GENERATION = "_generate"  # GRPOTrainer's method that samples a batch's completions (TRL 1.16)


def sft_classes(feature: str) -> tuple[type, type]:
    """(SFTConfig, SFTTrainer); ImportError naming `pip install 'turbotrain[llm]'` without TRL."""
    require("trl", feature)
    from trl import SFTConfig, SFTTrainer

    return SFTConfig, SFTTrainer


def dpo_classes(feature: str) -> tuple[type, type]:
    """(DPOConfig, DPOTrainer); ImportError naming `pip install 'turbotrain[llm]'` without TRL."""
    require("trl", feature)
    from trl import DPOConfig, DPOTrainer

    return DPOConfig, DPOTrainer


def kto_classes(feature: str) -> tuple[type, type]:
    """(KTOConfig, KTOTrainer); ImportError naming `pip install 'turbotrain[llm]'` without TRL."""
    require("trl", feature)
    from trl import KTOConfig, KTOTrainer

    return KTOConfig, KTOTrainer


def grpo_classes(feature: str) -> tuple[type, type]:
    """(GRPOConfig, GRPOTrainer); ImportError naming `pip install 'turbotrain[llm]'` without TRL."""
    require("trl", feature)
    from trl import GRPOConfig, GRPOTrainer

    return GRPOConfig, GRPOTrainer


def note_grpo_generations(trainer, noted: Callable[[float, list, list], None]) -> None:
    """Each generation of this GRPOTrainer reports (its seconds, the prompts' token ids, the completions' token
    ids: lists of id lists, one per completion) to `noted`; its results are TRL's, unchanged."""
    generate = getattr(trainer, GRPO_GENERATION, None)
    if generate is None:
        import trl

        raise RuntimeError(f"TRL {trl.__version__}'s GRPOTrainer has no {GRPO_GENERATION} to time generation by")

    def timed(prompts):
        start = time.perf_counter()
        output = generate(prompts)
        noted(time.perf_counter() - start, output[0], output[1])
        return output

    setattr(trainer, GRPO_GENERATION, timed)


def _loaded_trl_class(name: str) -> type | None:
    """TRL's public class `name` if TRL is imported (never imports it), else None."""
    if "trl" not in sys.modules:
        return None
    import trl

    return getattr(trl, name, None)


def _loaded_sft_trainer() -> type | None:
    return _loaded_trl_class("SFTTrainer")


def _is_instance_of(trainer, class_name: str) -> bool:
    found = _loaded_trl_class(class_name)
    trainer_class = trainer if isinstance(trainer, type) else type(trainer)
    return found is not None and issubclass(trainer_class, found)


def is_sft_trainer(trainer) -> bool:
    """`trainer` (an instance or a class) is TRL's SFTTrainer or derives from it."""
    return _is_instance_of(trainer, "SFTTrainer")


def is_dpo_trainer(trainer) -> bool:
    """`trainer` (an instance or a class) is TRL's DPOTrainer or derives from it."""
    return _is_instance_of(trainer, "DPOTrainer")


def is_grpo_trainer(trainer) -> bool:
    """`trainer` (an instance or a class) is TRL's GRPOTrainer or derives from it."""
    return _is_instance_of(trainer, "GRPOTrainer")


def packs_scored_calls(trainer) -> bool:
    """`trainer` makes its scored calls on padded rows whose real tokens are one block each, which padding-free
    may pack inside each call (passes/padding_free/scored_calls.py): TRL's DPOTrainer (rows flushed left) and
    KTOTrainer (DPO's calls), GRPOTrainer and RLOOTrainer (left-padded prompts, then right-padded completions)."""
    return is_dpo_trainer(trainer) or is_kto_trainer(trainer) or is_sampling_rl_trainer(trainer)


def is_kto_trainer(trainer) -> bool:
    """`trainer` (an instance or a class) is TRL's KTOTrainer or derives from it."""
    return _is_instance_of(trainer, "KTOTrainer")


def kto_refusal(trainer) -> str | None:
    """Why turbotrain does not answer this KTOTrainer's fused calls, or None. TRL 1.16's KTOTrainer makes DPO's
    calls (log-probs, entropy and mean logits of the completion tokens; the reference's and the KL pairs' log-probs
    under `no_grad`) and weights each sequence's summed log-probs by its own factor."""
    import trl

    if not trl.__version__.startswith(KTO_RELEASES):
        return f"TRL {trl.__version__} is not a release turbotrain checked KTOTrainer's calls against (1.16)"
    if getattr(trainer.args, "use_liger_kernel", False):
        return "Liger's kernels are on"
    return None


def is_sampling_rl_trainer(trainer) -> bool:
    """`trainer` (an instance or a class) samples completions and scores their tokens with TRL's fused head at its
    sampling temperature: GRPOTrainer or RLOOTrainer (or a class derived from one)."""
    return any(_is_instance_of(trainer, name) for name in SAMPLING_RL_TRAINERS)


def rl_refusal(trainer) -> str | None:
    """Why turbotrain does not answer this GRPOTrainer's or RLOOTrainer's fused calls (module docstring), or None.
    RLOOConfig has no entropy bonus or `cast_lm_head_to_fp32`: those settings read as off for it."""
    import trl

    args = trainer.args
    if not trl.__version__.startswith(RL_RELEASES):
        name = trl_trainer_name(trainer)
        return f"TRL {trl.__version__} is not a release turbotrain checked {name}'s calls against (1.16)"
    if getattr(args, "entropy_coef", 0.0) != 0.0 or getattr(args, "use_adaptive_entropy", False):
        return "its entropy bonus takes a gradient through the entropy, which turbotrain's op returns without one"
    if getattr(args, "cast_lm_head_to_fp32", False):
        return "cast_lm_head_to_fp32 replaces the head's forward"
    if getattr(args, "use_liger_kernel", False):
        return "Liger's kernels are on"
    return None


def fused_call_temperature(trainer) -> float:
    """The temperature TRL's fused head divides the logits by for `trainer`'s calls: GRPO's or RLOO's sampling
    one, else 1."""
    return float(trainer.args.temperature) if is_sampling_rl_trainer(trainer) else 1.0


def sums_tokens(trainer) -> bool:
    """TRL's SFTTrainer: its loss is a sum over tokens (so packing rows changes nothing)."""
    return is_sft_trainer(trainer)


def sums_log_probs(trainer) -> bool:
    """TRL's SFTTrainer with the "nll" loss: loss = -Σ log_probs / n, one weight for every token."""
    return is_sft_trainer(trainer) and getattr(trainer.args, "loss_type", "nll") == "nll"


def fused_call_weighting(trainer) -> str | None:
    """How `trainer` weights the per-token log-probabilities of its `fused_lm_head` calls (module docstring)."""
    if sums_log_probs(trainer):
        return "equal"
    args = getattr(trainer, "args", None)
    if (
        is_dpo_trainer(trainer)
        and not getattr(trainer, "use_weighting", False)
        and not getattr(args, "use_liger_kernel", False)
    ):
        return "per_row"
    if is_sampling_rl_trainer(trainer) and rl_refusal(trainer) is None:
        return "per_row"
    if is_kto_trainer(trainer) and kto_refusal(trainer) is None:
        return "per_row"
    return None


def trl_trainer_name(trainer) -> str | None:
    """The name of the first TRL class `trainer` (an instance or a class) derives from, or None."""
    trainer_class = trainer if isinstance(trainer, type) else type(trainer)
    found = next((c for c in trainer_class.__mro__ if c.__module__.split(".")[0] == "trl"), None)
    return found.__name__ if found is not None else None


def unanswered_token_scores(trainer) -> str | None:
    """Why label sparsity has nothing to act on in `trainer`, or None: a TRL trainer other than SFTTrainer scores
    its tokens itself (TRL's fused LM head, or its own log-softmax over logits it asks for without labels),
    and turbotrain answers those calls only where it knows the trainer's weighting (`fused_call_weighting`)."""
    name = trl_trainer_name(trainer)
    if name is None or is_sft_trainer(trainer) or fused_call_weighting(trainer) is not None:
        return None
    why = rl_refusal(trainer) if is_sampling_rl_trainer(trainer) else None
    why = kto_refusal(trainer) if is_kto_trainer(trainer) else why
    return (
        f"TRL's {name} scores its tokens itself (its fused LM head or its own log-softmax), which turbotrain does "
        f"not answer for this trainer{f' ({why})' if why else ''}: TRL's computation runs"
    )


def separate_reference_model(trainer) -> torch.nn.Module | None:
    """The own reference model (`ref_model`, full fine-tuning) of DPOTrainer, KTOTrainer, GRPOTrainer or RLOOTrainer,
    where it is a plain module: None for a LoRA run (the reference is the policy with its adapters off), a DeepSpeed or
    FSDP run, and other trainers."""
    reference = getattr(trainer, "ref_model", None)
    known = is_dpo_trainer(trainer) or is_kto_trainer(trainer) or is_sampling_rl_trainer(trainer)
    if not known or not isinstance(reference, torch.nn.Module):
        return None
    if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
        return None
    return reference


def counts_tokens_from_mask(trainer_class: type) -> bool:
    """`trainer_class` computes its loss with SFTTrainer's own `compute_loss`, which counts `num_tokens` on
    the attention mask (a user's subclass that overrides it is left as it is)."""
    sft = _loaded_sft_trainer()
    return sft is not None and getattr(trainer_class, "compute_loss", None) is sft.compute_loss


class TrlTokenCount:
    """SFTTrainer's `num_tokens` metric counted on a packed batch's real tokens (see the module docstring).
    Placed before TRL trainers only (`turbo()`), so other Trainer classes keep Trainer's `compute_loss`."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mask, real = inputs.get("attention_mask"), inputs.get(REAL_TOKENS)
        result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if real is not None and mask is not None and self.model.training and hasattr(self, "_total_train_tokens"):
            difference = torch.as_tensor(real, device=mask.device) - mask.sum()
            total = self.accelerator.gather_for_metrics(difference.reshape(1)).sum().item()
            self._total_train_tokens += total // getattr(self, "_tp_size", 1)
            self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
        return result


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
