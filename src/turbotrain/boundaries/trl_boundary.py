"""The boundary with TRL's names: its classes looked up (never imported until asked for), the private attributes
turbotrain reads or writes, and its trainers' public attributes read by `getattr`. What turbotrain knows of each
TRL trainer is the table in integrations/trl/; this module holds no policy.

TRL is the `llm` extra. Nothing here imports it until asked for a TRL class (`public_classes`, an ImportError
naming the extra without it), and the class lookups answer "no" while TRL is not imported (no class can derive
from `SFTTrainer` before then). The private names, pinned by tests/test_trl_boundary.py: the `num_tokens` metric's
state (`TRL_PRIVATE_ATTRIBUTES`, which `TrlTokenCount` corrects to a packed batch's real tokens) and GRPO's
`_generate` (`GRPO_GENERATION`, the benchmark's clock on generation).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

from turbotrain.utils.batch_keys import PADDED_MASK
from turbotrain.utils.imports import require

TRL_PRIVATE_ATTRIBUTES = ("_total_train_tokens", "_metrics", "_tp_size")
GRPO_GENERATION = "_generate"  # GRPOTrainer's method that samples a batch's completions (TRL 1.16)


def public_classes(names: tuple[str, ...], feature: str) -> tuple[type, ...]:
    """TRL's public classes `names`; ImportError naming `pip install 'turbotrain[llm]'` without TRL."""
    require("trl", feature)
    import trl

    return tuple(getattr(trl, name) for name in names)


def trl_version() -> str:
    import trl

    return trl.__version__


def note_grpo_generations(trainer, noted: Callable[[float, list, list], None]) -> None:
    """Each generation of this GRPOTrainer reports (its seconds, the prompts' token ids, the completions' token
    ids: lists of id lists, one per completion) to `noted`; its results are TRL's, unchanged."""
    generate = getattr(trainer, GRPO_GENERATION, None)
    if generate is None:
        raise RuntimeError(f"TRL {trl_version()}'s GRPOTrainer has no {GRPO_GENERATION} to time generation by")

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


def derives_from(trainer, class_name: str) -> bool:
    """`trainer` (an instance or a class) is TRL's public class `class_name` or derives from it."""
    found = _loaded_trl_class(class_name)
    trainer_class = trainer if isinstance(trainer, type) else type(trainer)
    return found is not None and issubclass(trainer_class, found)


def is_sft_trainer(trainer) -> bool:
    """`trainer` (an instance or a class) is TRL's SFTTrainer or derives from it."""
    return derives_from(trainer, "SFTTrainer")


def trl_trainer_name(trainer) -> str | None:
    """The name of the first TRL class `trainer` (an instance or a class) derives from, or None."""
    trainer_class = trainer if isinstance(trainer, type) else type(trainer)
    found = next((c for c in trainer_class.__mro__ if c.__module__.split(".")[0] == "trl"), None)
    return found.__name__ if found is not None else None


def reference_model(trainer) -> torch.nn.Module | None:
    """`trainer`'s own reference model (`ref_model`, full fine-tuning) where it is a plain module: None for a LoRA
    run (the reference is the policy with its adapters off), a DeepSpeed or FSDP run, and no reference."""
    reference = getattr(trainer, "ref_model", None)
    if not isinstance(reference, torch.nn.Module):
        return None
    if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
        return None
    return reference


def counts_tokens_from_mask(trainer_class: type) -> bool:
    """`trainer_class` computes its loss with SFTTrainer's own `compute_loss`, which counts `num_tokens` on
    the attention mask (a user's subclass that overrides it is left as it is)."""
    sft = _loaded_trl_class("SFTTrainer")
    return sft is not None and getattr(trainer_class, "compute_loss", None) is sft.compute_loss


class TrlTokenCount:
    """SFTTrainer's `num_tokens` metric (`attention_mask.sum()`, a packed batch's [R, 1, C, C] block mask there)
    corrected to the real tokens of the padded mask the packer kept (`PADDED_MASK`). Placed before a trainer class whose
    `compute_loss` is SFTTrainer's own (`counts_tokens_from_mask`, `turbo()`), other classes keep theirs."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mask, padded = inputs.get("attention_mask"), inputs.get(PADDED_MASK)
        result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if padded is not None and mask is not None and self.model.training and hasattr(self, "_total_train_tokens"):
            difference = padded.to(mask.device).sum() - mask.sum()
            total = self.accelerator.gather_for_metrics(difference.reshape(1)).sum().item()
            self._total_train_tokens += total // getattr(self, "_tp_size", 1)
            self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
        return result


TRL_HEAD_CHUNK = "_CHUNKED_LOGPROB_CHUNK_SIZE"  # trl.trainer.utils: the vocabulary tile its fused LM head passes


def trl_head_log_probs(hidden, weight, bias, targets, temperature: float, softcap, outputs: tuple[str, ...]):
    """TRL's fused LM head kernel (the public `trl.kernels.ChunkedLogProbFunction`, Triton on CUDA) on scored rows
    `hidden` [K, H] with the tile TRL's own head passes: (log_probs, entropy, log_sum_sq_probs, mean_logits,
    is_top1), each [K] or None where `outputs` does not ask for it."""
    from trl.kernels import ChunkedLogProbFunction
    from trl.trainer import utils

    chunk = getattr(utils, TRL_HEAD_CHUNK, 32768)
    return ChunkedLogProbFunction.apply(hidden, weight, bias, targets, temperature, chunk, softcap, 1.0, outputs)
