"""The xla backend's training loop: Trainer's own parts around one compiled step.

Trainer's loop is built on torch tensors and `loss.backward()`, so the xla backend replaces only
Trainer's inner training loop and reuses the rest of Trainer: the dataloader (`get_train_dataloader`,
sampler, collator), the step and epoch arithmetic (`set_initial_training_values`), the state and resume
(torch optimizer + Trainer's LR scheduler, loaded from a checkpoint on resume), the batch counting
(`get_batch_samples` -> `num_items_in_batch`), callbacks, logging, evaluation and checkpointing, and the
end of training. Trainer's private parts are reached through `turbotrain.hf_boundary` only.

What differs from Trainer's loop:
* batch size: `per_device_train_batch_size` is per jax device, so one batch is that times the mesh's
  data-parallel size, spread over the devices;
* each optimizer step is one call of the compiled step; the LR is read from Trainer's scheduler
  before it steps, exactly as Trainer logs it;
* before evaluation, a checkpoint and at the end, the weights and AdamW moments are copied back into
  the torch model and optimizer (`state.write_back`), so evaluation runs in torch on the trained
  weights and checkpoints are ordinary Trainer checkpoints;
* the loss is read from the device only when Trainer logs it (no host sync per step).
"""

from __future__ import annotations

import logging
import time
import warnings

import jax
from transformers import Trainer
from transformers.trainer_pt_utils import get_model_param_count
from transformers.trainer_utils import TrainOutput

from turbotrain import hf_boundary
from turbotrain.backends.xla.batches import BatchLayout, step_arrays
from turbotrain.backends.xla.mesh import (
    data_parallel_mesh,
    data_parallel_size,
    replicated,
)
from turbotrain.backends.xla.optimizer import torch_adamw
from turbotrain.backends.xla.options import XlaOptions
from turbotrain.backends.xla.state import (
    TrainState,
    split_parameters,
    torch_moments,
    write_back,
)
from turbotrain.backends.xla.step import CompiledStep

logger = logging.getLogger("turbotrain")
ADAMW_OPTIMS = ("adamw_torch", "adamw_torch_fused")
OVERRIDES_BYPASSED = ("training_step", "compute_loss")


def check_trainer(trainer: Trainer) -> None:
    """Refuse what the compiled step would silently ignore."""
    args = trainer.args
    if trainer.turbo_optim not in ADAMW_OPTIMS:  # the optimizer the run uses (args.optim, fused where it can be)
        raise ValueError(
            f"backend 'xla' trains with torch's AdamW semantics; optim={trainer.turbo_optim!r} is not supported "
            f"(use one of {ADAMW_OPTIMS})"
        )
    for name in OVERRIDES_BYPASSED:
        if getattr(type(trainer), name) is not getattr(Trainer, name):
            raise ValueError(
                f"backend 'xla' computes the loss inside its compiled step; {type(trainer).__name__} "
                f"overrides {name}(), which it would bypass"
            )
    if trainer.compute_loss_func is not None or args.label_smoothing_factor != 0:
        raise ValueError(
            "backend 'xla' uses the model's own loss; compute_loss_func and label smoothing are not supported"
        )
    if args.fp16 or args.bf16:
        raise ValueError("backend 'xla' trains in float32 for now; fp16/bf16 mixed precision is not supported")
    if args.auto_find_batch_size:
        raise ValueError("backend 'xla' sets the batch per jax device itself; auto_find_batch_size is not supported")


class XlaRun:
    """One `train()` call on the xla backend."""

    def __init__(self, trainer: Trainer, options: XlaOptions):
        check_trainer(trainer)
        self.trainer = trainer
        self.options = options
        self.mesh = data_parallel_mesh(options.num_devices)
        self.pending_loss = None
        self.state: TrainState | None = None
        self.step: CompiledStep | None = None
        self.written_at: int | None = None  # the global step whose weights the torch model holds

    def _layout(self, model) -> BatchLayout:
        report = self.trainer.turbo_report
        sparsity = report.label_sparsity if report is not None else None
        pad = getattr(model.config, "pad_token_id", None)
        return BatchLayout(
            global_rows=hf_boundary.train_batch_size(self.trainer),
            data_parallel=data_parallel_size(self.mesh),
            pad_token_id=pad if pad is not None else 0,
            length_buckets=self.options.length_buckets,
            label_row_buckets=self.options.label_row_buckets,
            sparsity_causal=sparsity.head.causal if sparsity is not None else None,
        )

    def _build_step(self, model) -> CompiledStep:
        args, trainer = self.trainer.args, self.trainer
        trainable, frozen = split_parameters(model)
        decay = set(trainer.get_decay_parameter_names(model))
        adamw = torch_adamw(
            args.adam_beta1,
            args.adam_beta2,
            args.adam_epsilon,
            args.weight_decay,
            {name: name in decay for name in trainable},
        )
        max_grad_norm = args.max_grad_norm if args.max_grad_norm and args.max_grad_norm > 0 else None
        report = trainer.turbo_report
        step = CompiledStep(
            model,
            max_grad_norm,
            adamw,
            self.mesh,
            report.label_sparsity if report else None,
            self.options.matmul_precision,
        )
        self.frozen = jax.device_put(frozen, replicated(self.mesh))
        # every leaf placed like the step's outputs, or the second call would compile again
        self.state = jax.device_put(
            TrainState(trainable, self._opt_state(adamw, model, trainable)), replicated(self.mesh)
        )
        return step

    def _opt_state(self, adamw, model, params: dict):
        state = adamw.init(params)
        moments = torch_moments(model, self.trainer.optimizer, list(params))
        if moments is not None:  # resuming: continue from the checkpoint's AdamW state
            count, mu, nu = moments
            state = state._replace(count=jax.numpy.asarray(count, jax.numpy.int32), mu=mu, nu=nu)
        return state

    def write_back(self) -> None:
        """Copy the weights and AdamW moments into the torch model and optimizer (once per step at most)."""
        if self.written_at == self.trainer.state.global_step:
            return
        adam = self.state.opt_state
        write_back(self.trainer.model, self.trainer.optimizer, self.state.params, adam.count, adam.mu, adam.nu)
        self.written_at = self.trainer.state.global_step

    def _flush_loss(self) -> None:
        if self.pending_loss is not None:
            hf_boundary.add_to_running_loss(self.trainer, float(self.pending_loss))
            self.pending_loss = None

    def run(self, batch_size, args, resume_from_checkpoint, trial, ignore_keys_for_eval) -> TrainOutput:
        trainer = self.trainer
        hf_boundary.set_train_batch_size(trainer, args.per_device_train_batch_size * data_parallel_size(self.mesh))
        dataloader = trainer.get_train_dataloader()
        (
            num_train_epochs,
            num_update_steps_per_epoch,
            _examples,
            num_train_samples,
            _total_batch,
            steps_in_epoch,
            max_steps,
        ) = trainer.set_initial_training_values(args, dataloader)
        epochs_trained, skip_batches = hf_boundary.init_training_state(
            trainer, max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
        )
        model, dataloader = hf_boundary.prepare_for_training(trainer, max_steps, dataloader, resume_from_checkpoint)
        model.train()
        step = self.step = self._build_step(trainer.model)
        layout = self._layout(trainer.model)
        logger.info(
            "turbotrain xla: %d steps, batch %d over %d device(s) %s, %d trainable parameters",
            max_steps,
            hf_boundary.train_batch_size(trainer),
            layout.data_parallel,
            [d.platform for d in self.mesh.devices.flat][:1],
            get_model_param_count(trainer.model, trainable_only=True),
        )
        start_time = time.time()
        hf_boundary.start_loss_tracking(trainer)
        key = jax.random.key(args.seed)
        trainer.control = trainer.callback_handler.on_train_begin(args, trainer.state, trainer.control)
        for epoch in range(epochs_trained, num_train_epochs):
            self._train_epoch(
                step,
                layout,
                key,
                dataloader,
                epoch,
                steps_in_epoch,
                skip_batches if epoch == epochs_trained and resume_from_checkpoint else 0,
                trial,
                ignore_keys_for_eval,
                start_time,
            )
            if trainer.control.should_training_stop:
                break
        self._flush_loss()
        self.write_back()
        return hf_boundary.finalize_training(trainer, trial, num_train_samples, start_time)

    def _batches(self, dataloader, epoch: int, skip: int):
        from accelerate import skip_first_batches

        if hasattr(dataloader, "set_epoch"):
            dataloader.set_epoch(epoch)
        return iter(skip_first_batches(dataloader, skip) if skip else dataloader)

    def _train_epoch(self, step, layout, key, dataloader, epoch, steps_in_epoch, skip, trial, ignore_keys, start_time):
        trainer, args = self.trainer, self.trainer.args
        control = trainer.control = trainer.callback_handler.on_epoch_begin(args, trainer.state, trainer.control)
        batches = self._batches(dataloader, epoch, skip)
        accumulation = args.gradient_accumulation_steps
        seen, grad_norm, learning_rate = skip, None, None
        while True:
            micro_batches, num_items = trainer.get_batch_samples(batches, accumulation, args.device)
            if not micro_batches:
                break
            control = trainer.control = trainer.callback_handler.on_step_begin(args, trainer.state, control)
            learning_rate = hf_boundary.learning_rate(trainer)
            step_key = jax.random.fold_in(key, trainer.state.global_step)
            self.state, loss, grad_norm = step(
                self.state, self.frozen, step_arrays(micro_batches, layout), num_items, learning_rate, step_key
            )
            self.pending_loss = loss if self.pending_loss is None else self.pending_loss + loss
            for micro in micro_batches:
                trainer.current_flos += float(trainer.floating_point_ops(micro))
                hf_boundary.track_input_tokens(trainer, micro)
            with warnings.catch_warnings():  # the AdamW step ran in jax, not in the torch optimizer
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)`")
                trainer.lr_scheduler.step()
            seen += len(micro_batches)
            trainer.state.global_step += 1
            trainer.state.epoch = epoch + seen / steps_in_epoch
            control = trainer.control = trainer.callback_handler.on_step_end(args, trainer.state, control)
            self._log_save_evaluate(grad_norm, trial, epoch, ignore_keys, start_time, learning_rate)
            if trainer.control.should_epoch_stop or trainer.control.should_training_stop:
                break
        trainer.control = trainer.callback_handler.on_epoch_end(args, trainer.state, trainer.control)
        self._log_save_evaluate(grad_norm, trial, epoch, ignore_keys, start_time, learning_rate)

    def _log_save_evaluate(self, grad_norm, trial, epoch, ignore_keys, start_time, learning_rate) -> None:
        trainer, control = self.trainer, self.trainer.control
        if control.should_log:
            self._flush_loss()
        if control.should_evaluate or control.should_save:
            self.write_back()
        norm = float(grad_norm) if (control.should_log and grad_norm is not None) else None
        hf_boundary.log_save_evaluate(trainer, norm, trial, epoch, ignore_keys, start_time, learning_rate)
