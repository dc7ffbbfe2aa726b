"""`TurboTrainer`: `transformers.Trainer` with turbotrain's passes and backends, nothing else changed.

It hooks in only through Trainer's overridable methods and never copies the training loop:

* `__init__`: resolve the backend and let it adjust the arguments before Trainer builds its
  accelerator; choose the fused AdamW; install the model passes (`optimize`).
* `call_model_init`: install the same passes on every model `model_init` makes (hyperparameter
  search re-initialises the model per trial).
* `get_train_dataloader`: the training batches go through the padding-free packer; evaluation and
  prediction keep the user's collator, so `compute_metrics` sees padded, full logits.
* `_get_train_sampler`: with `max_tokens_per_batch`, a token-budget batch sampler (data/token_budget.py).
* `_get_num_items_in_batch`: Trainer counts the loss's items on the padded labels that packed
  batches carry, so its count (whose rule depends on the model's `loss_type`) is the stock one.
* `_inner_training_loop`: a backend that cannot run inside Trainer's loop (xla) supplies its own
  (`Backend.training_loop`); every other backend keeps Trainer's.
* `_save_checkpoint` / `train(resume_from_checkpoint=...)`: every checkpoint is committed only once
  fully on disk (with its files' sizes and checksums), and resuming skips one a kill cut off mid-write
  or that was damaged since (checkpoints.py); Trainer's own code writes and loads it.

Label smoothing and a custom `compute_loss_func` read the full logits, so label sparsity steps aside
for them (one warning) instead of changing the numbers.

Callbacks, logging, evaluation, checkpoints, `resume_from_checkpoint`, `save_pretrained` output,
gradient accumulation, fp16/bf16 and `hyperparameter_search` are Trainer's own, untouched.
"""

from __future__ import annotations

import inspect
import logging
import os

from torch import nn
from transformers import Trainer, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from turbotrain import checkpoints
from turbotrain.args import TurboOptions, TurboTrainingArguments
from turbotrain.backends import get_backend
from turbotrain.data.token_budget import TokenBudgetBatchSampler, example_lengths
from turbotrain.passes.fused_optimizer import resolve_optim_name
from turbotrain.passes.optimize import OptimizeReport, optimize
from turbotrain.passes.packing import PADDED_LABELS
from turbotrain.utils.warnings import warn_once

logger = logging.getLogger("turbotrain")
_TRAINER_SIGNATURE = inspect.signature(Trainer.__init__)


class TurboTrainer(Trainer):
    """Drop-in replacement for `transformers.Trainer`; see the module docstring for what it changes."""

    def __init__(self, model: nn.Module | None = None, args: TrainingArguments | None = None, *rest, **kwargs):
        args = args if args is not None else TurboTrainingArguments(output_dir="tmp_trainer")
        bound = _TRAINER_SIGNATURE.bind(self, model, args, *rest, **kwargs).arguments
        self.backend = get_backend(TurboOptions.from_args(args).backend_for(args.device))
        self.backend.check_available(args)
        self.backend.configure(args)
        self.turbo_options = TurboOptions.from_args(args)
        self._sparsity_allowed = self._label_sparsity_allowed(args, bound.get("compute_loss_func"))
        args.optim = resolve_optim_name(args.optim, args.device, self.turbo_options.fused_optimizer)
        self.turbo_report: OptimizeReport | None = None
        if model is not None:
            model = self._prepare_model(model)
        super().__init__(model, args, *rest, **kwargs)
        logger.info("turbotrain: backend=%s optim=%s; %s", self.backend.name, args.optim, self.turbo_report)

    def _label_sparsity_allowed(self, args: TrainingArguments, compute_loss_func) -> bool:
        if not self.turbo_options.label_sparsity:
            return False
        if args.label_smoothing_factor != 0 or compute_loss_func is not None:
            warn_once(
                "turbotrain: label sparsity is off for this run: label smoothing or a custom compute_loss_func "
                "reads the full logits."
            )
            return False
        return True

    def _prepare_model(self, model: nn.Module) -> nn.Module:
        self.turbo_report = optimize(model, label_sparsity=self._sparsity_allowed,
                                     padding_free=self.turbo_options.padding_free,
                                     embedding_grad=self.turbo_options.embedding_grad)
        return self.backend.wrap_model(model)

    def call_model_init(self, trial=None) -> nn.Module:
        return self._prepare_model(super().call_model_init(trial))

    def get_train_dataloader(self):
        if self.turbo_report is None or self.turbo_report.padding_free is None or self.data_collator is None:
            return super().get_train_dataloader()
        user_collator = self.data_collator
        self.data_collator = self.turbo_report.collator(user_collator)
        try:
            return super().get_train_dataloader()
        finally:
            self.data_collator = user_collator

    def _get_train_sampler(self, train_dataset=None):
        budget = self.turbo_options.max_tokens_per_batch
        if budget is None:
            return super()._get_train_sampler(train_dataset)
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        return TokenBudgetBatchSampler(example_lengths(dataset), budget, seed=seed,
                                       rank=self.args.process_index, world_size=self.args.world_size)

    def _get_num_items_in_batch(self, batch_samples, device):
        if batch_samples and all(PADDED_LABELS in batch for batch in batch_samples):
            batch_samples = [{**batch, "labels": batch[PADDED_LABELS]} for batch in batch_samples]
        return super()._get_num_items_in_batch(batch_samples, device)

    def _inner_training_loop(self, batch_size=None, args=None, resume_from_checkpoint=None, trial=None,
                             ignore_keys_for_eval=None):
        loop = self.backend.training_loop(self)
        if loop is None:
            return super()._inner_training_loop(batch_size, args, resume_from_checkpoint, trial, ignore_keys_for_eval)
        return loop(batch_size, args, resume_from_checkpoint, trial, ignore_keys_for_eval)

    def _save_checkpoint(self, model, trial) -> None:
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        if self.args.should_save:
            checkpoints.begin(folder)
        limit, self.args.save_total_limit = self.args.save_total_limit, None  # rotate only after the commit
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        if self.args.should_save:
            checkpoints.commit(folder)
            rotate_checkpoints(output_dir=self._get_output_dir(trial=trial), save_total_limit=limit,
                               best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)

    def train(self, resume_from_checkpoint=None, trial=None, **kwargs):
        resume_from_checkpoint = checkpoints.resume_checkpoint(resume_from_checkpoint, self.args.output_dir)
        return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial, **kwargs)
