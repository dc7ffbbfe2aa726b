"""`TurboTrainer` and `turbo(TrainerClass)`: a Trainer with turbotrain's passes and backends, nothing else changed.

`TurboMixin` is placed before a `transformers.Trainer` class (`turbo(SFTTrainer)`, `turbo(Seq2SeqTrainer)`;
`TurboTrainer` is `turbo(Trainer)`). It hooks in only through Trainer's overridable methods and never
copies the training loop; Trainer's private hooks are reached through `hf_boundary.TrainerBoundary`,
which forwards them to the public `turbo_*` methods here:

* `__init__`: after the Trainer class has built itself (a subclass may have wrapped the model, e.g.
  TRL's `SFTTrainer` with a `peft_config`), read the options once, choose the backend and the effective
  options (`TurboOptions.without` what the backend turns off), choose the fused AdamW, and install the
  model passes (`optimize`) on the model the Trainer trains.
* `__init__` also adds the backend's callbacks (`auto` times steps with one) and the summary callback:
  when training begins, one WARNING-level line says which backend and passes are active and why any
  requested pass is not (summary.py); an fp32 run on a CPU gets one more line on bf16 (bf16_hint.py).
* `call_model_init`: install the same passes on every model `model_init` makes (hyperparameter search).
* `get_train_dataloader`: the training batches go through the padding-free packer; evaluation and
  prediction keep the user's collator, so `compute_metrics` sees padded, full logits.
* `turbo_train_sampler`: with `max_tokens_per_batch`, a token-budget batch sampler (data/token_budget.py).
* `turbo_count_batches`: Trainer counts the loss's items on the padded labels that packed batches
  carry, so its count (whose rule depends on the model's `loss_type`) is the stock one.
* `turbo_training_loop`: a backend that cannot run inside Trainer's loop (xla) supplies its own.
* `turbo_checkpoint` / `train(resume_from_checkpoint=...)`: every checkpoint is committed only once
  fully on disk (with its files' sizes and checksums), and resuming skips one a kill cut off mid-write
  or that was damaged since (checkpoints.py); Trainer's own code writes and loads it.

Label smoothing and a custom `compute_loss_func` read the full logits, so label sparsity steps aside
for them (one warning) instead of changing the numbers. Padding-free packing changes a batch's rows, so
it steps aside (one log line) for trainers that compute their own loss other than TRL's `SFTTrainer`
(whose loss is a sum over tokens; DPO's reads chosen/rejected rows). TRL's `fused_lm_head` calls are
answered by the chunked head only for `SFTTrainer` with `loss_type="nll"` (passes/fused_head_calls.py),
and TRL trainers get their `num_tokens` metric counted on real tokens (`hf_boundary.TrlTokenCount`).

Callbacks, logging, evaluation, checkpoints, `resume_from_checkpoint`, `save_pretrained` output,
gradient accumulation, fp16/bf16 and `hyperparameter_search` are Trainer's own, untouched.
"""

from __future__ import annotations

import contextlib
import logging

from torch import nn
from transformers import Seq2SeqTrainer, Trainer

from turbotrain import checkpoints
from turbotrain.args import TurboOptions, TurboTrainingArguments
from turbotrain.backends import get_backend
from turbotrain.bf16_hint import bf16_hint, wants_hint
from turbotrain.data.token_budget import TokenBudgetBatchSampler, example_lengths
from turbotrain.hf_boundary import TrainerBoundary, TrlTokenCount, counts_tokens_from_mask, rotate_checkpoints
from turbotrain.passes import fused_head_calls
from turbotrain.passes.fused_optimizer import resolve_optim_name
from turbotrain.passes.optimize import OptimizeReport, optimize
from turbotrain.passes.packing import PADDED_LABELS
from turbotrain.summary import SummaryCallback, not_active, summary_line
from turbotrain.utils.warnings import log_once, warn_once

logger = logging.getLogger("turbotrain")


class TurboMixin(TrainerBoundary):
    """turbotrain's part of a Trainer class; see the module docstring for what it changes."""

    turbo_report: OptimizeReport | None = None

    def __init__(self, *args, **kwargs):
        self._turbo_ready = False
        super().__init__(*args, **kwargs)
        requested = TurboOptions.from_args(self.args)
        self.backend = get_backend(requested.backend_for(self.args.device), requested.backend_options)
        self.backend.check_available(self.args)
        self.turbo_requested = requested
        self.turbo_options = requested.without(self.backend.turns_off, self.backend.name)
        self.turbo_refused = {
            name: f"not used with backend {self.backend.name}: {why}" for name, why in self.backend.turns_off.items()
        }
        self.args.optim = resolve_optim_name(self.args.optim, self.args.device, self.turbo_options.fused_optimizer)
        self._turbo_ready = True
        if self.model is not None and self.turbo_report is None:
            self.model = self.model_wrapped = self._prepare_model(self.model)
        for callback in [*self.backend.callbacks(), SummaryCallback(self)]:
            self.add_callback(callback)
        if wants_hint(self.args):
            log_once(bf16_hint(), logging.WARNING)

    def turbo_summary(self) -> str:
        """The run's one-line summary (summary.py): backend, active passes, optimizer, what is not active and why."""
        applied = self.turbo_report.applied if self.turbo_report is not None else []
        skipped = self.turbo_report.skipped if self.turbo_report is not None else []
        missing = not_active(self.turbo_requested, self.turbo_options, applied, self.turbo_refused, skipped)
        chunked = self.turbo_report.chunked_ce if self.turbo_report is not None else None
        if chunked is not None and chunked.mode == "auto":  # installed, but used only on large calls
            applied = [f"{name} ({chunked.auto_rule})" if name == "chunked_ce" else name for name in applied]
        return summary_line(self.backend.summary(), applied, self.args.optim, missing)

    def _label_sparsity_allowed(self) -> bool:
        if not self.turbo_options.label_sparsity:
            return False
        if self.args.label_smoothing_factor != 0 or self.compute_loss_func is not None:
            self.turbo_refused["label_sparsity"] = "label smoothing or a custom compute_loss_func reads the full logits"
            warn_once(
                "turbotrain: label sparsity is off for this run: label smoothing or a custom compute_loss_func "
                "reads the full logits."
            )
            return False
        return True

    def _padding_free_allowed(self) -> bool:
        """Packing changes the rows of a batch: only for losses that are a sum over tokens (Trainer's, SFT's)."""
        if not self.turbo_options.padding_free:
            return False
        if type(self).compute_loss is Trainer.compute_loss or fused_head_calls.sums_tokens(self):
            return True
        logger.info(
            "turbotrain: padding-free steps aside: %s computes its own loss, which may read rows (e.g. "
            "chosen/rejected pairs); its batches stay padded",
            type(self).__name__,
        )
        return False

    def _prepare_model(self, model: nn.Module) -> nn.Module:
        self.turbo_report = optimize(
            model,
            label_sparsity=self._label_sparsity_allowed(),
            padding_free=self._padding_free_allowed(),
            padding_free_with_dropout=self.turbo_options.padding_free_with_dropout,
            padding_free_row_tokens=self.turbo_options.row_tokens(),
            padding_free_attention=self.turbo_options.padding_free_attention,
            embedding_grad=self.turbo_options.embedding_grad,
            chunked_cross_entropy=self.turbo_options.chunked_cross_entropy,
            fused_activation=self.turbo_options.fused_activation,
        )
        if self.turbo_report.chunked_ce is not None:
            self.turbo_report.chunked_ce.compose_fused_calls = fused_head_calls.sums_log_probs(self)
        return self.backend.wrap_model(model)

    def call_model_init(self, trial=None) -> nn.Module:
        model = super().call_model_init(trial)
        # during Trainer.__init__ the options are not read yet; __init__ prepares that model afterwards
        return self._prepare_model(model) if self._turbo_ready else model

    def get_train_dataloader(self):
        if self.turbo_report is None or self.turbo_report.padding_free is None or self.data_collator is None:
            return super().get_train_dataloader()
        user_collator = self.data_collator
        self.data_collator = self.turbo_report.collator(user_collator)
        try:
            return super().get_train_dataloader()
        finally:
            self.data_collator = user_collator

    # --- the public hooks TrainerBoundary forwards Trainer's private ones to -------------------------

    def turbo_train_sampler(self, dataset):
        """A token-budget batch sampler with `max_tokens_per_batch`, or None for Trainer's own sampler."""
        budget = self.turbo_options.max_tokens_per_batch
        if budget is None:
            return None
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        return TokenBudgetBatchSampler(
            example_lengths(dataset), budget, seed=seed, rank=self.args.process_index, world_size=self.args.world_size
        )

    def turbo_count_batches(self, batch_samples: list) -> list:
        """The batches Trainer counts loss items on: packed ones with their padded labels put back."""
        if batch_samples and all(PADDED_LABELS in batch for batch in batch_samples):
            return [{**batch, "labels": batch[PADDED_LABELS]} for batch in batch_samples]
        return batch_samples

    def turbo_training_loop(self):
        """The backend's own loop (same arguments as Trainer's inner loop), or None to keep Trainer's."""
        return self.backend.training_loop(self)

    @contextlib.contextmanager
    def turbo_checkpoint(self, folder: str, output_dir: str):
        """Around Trainer's save of `folder`: begin, then commit once on disk, then rotate old checkpoints."""
        if self.args.should_save:
            checkpoints.begin(folder)
        limit, self.args.save_total_limit = self.args.save_total_limit, None  # rotate only after the commit
        try:
            yield
        finally:
            self.args.save_total_limit = limit
        if self.args.should_save:
            checkpoints.commit(folder)
            rotate_checkpoints(self, output_dir)

    def train(self, resume_from_checkpoint=None, trial=None, **kwargs):
        resume_from_checkpoint = checkpoints.resume_checkpoint(resume_from_checkpoint, self.args.output_dir)
        return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial, **kwargs)


class TurboTrainer(TurboMixin, Trainer):
    """Drop-in replacement for `transformers.Trainer`; see the module docstring for what it changes."""

    def __init__(self, model: nn.Module | None = None, args=None, *rest, **kwargs):
        args = args if args is not None else TurboTrainingArguments(output_dir="tmp_trainer")
        super().__init__(model, args, *rest, **kwargs)


_TRAINER_CLASSES: dict[type, type] = {Trainer: TurboTrainer}


def turbo(trainer_class: type[Trainer]) -> type[Trainer]:
    """`trainer_class` with turbotrain's passes and backends: `turbo(SFTTrainer)(model=..., args=...)`.

    Options come from the arguments object: a `turbotrain.turbo_arguments(ConfigClass)` instance (or
    `TurboTrainingArguments`); plain arguments get the defaults. The class is made once per Trainer class.
    """
    if isinstance(trainer_class, type) and issubclass(trainer_class, TurboMixin):
        return trainer_class
    if not (isinstance(trainer_class, type) and issubclass(trainer_class, Trainer)):
        raise TypeError(f"turbo() takes a transformers.Trainer subclass, got {trainer_class!r}")
    if trainer_class not in _TRAINER_CLASSES:
        name = f"Turbo{trainer_class.__name__}"
        namespace = {
            "__module__": __name__,
            "__qualname__": name,
            "__doc__": f"`{trainer_class.__name__}` with turbotrain's passes and backends (`turbo()`).",
        }
        bases = (TrlTokenCount, TurboMixin) if counts_tokens_from_mask(trainer_class) else (TurboMixin,)
        _TRAINER_CLASSES[trainer_class] = type(name, (*bases, trainer_class), namespace)
    return _TRAINER_CLASSES[trainer_class]


TurboSeq2SeqTrainer = turbo(Seq2SeqTrainer)  # was: Seq2SeqTrainer (with TurboSeq2SeqTrainingArguments)
