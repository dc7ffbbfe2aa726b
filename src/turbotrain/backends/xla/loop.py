"""The xla backend's training loop: Trainer's own parts around one compiled step.

Trainer's loop is built on torch tensors and `loss.backward()`, so the xla backend replaces only
Trainer's inner training loop and reuses the rest of Trainer: the dataloader (`get_train_dataloader`,
sampler, collator), the step and epoch arithmetic (`set_initial_training_values`), the state and resume
(torch optimizer + Trainer's LR scheduler, loaded from a checkpoint on resume), the batch counting
(`get_batch_samples` -> `num_items_in_batch`), callbacks, logging, evaluation and checkpointing, and the
end of training. Trainer's private parts are reached through `turbotrain.boundaries.hf_boundary` only.

What differs from Trainer's loop:
* batch size: `per_device_train_batch_size` is per jax device, so one batch is that times the mesh's
  data-parallel size, spread over the devices;
* each optimizer step is one call of the compiled step; the LR is read from Trainer's scheduler
  before it steps, exactly as Trainer logs it;
* before evaluation, a checkpoint and at the end, the weights and AdamW moments are copied back into
  the torch model and optimizer (`state.write_back`), so evaluation runs in torch on the trained
  weights and checkpoints are ordinary Trainer checkpoints;
* the loss is read from the device only when Trainer logs it (no device sync per step);
* on several hosts (hosts.py): each host's dataloader gives its own rows of every global batch
  (host_data.py), the hosts agree on the padded shape and the loss's item count with one small
  all-gather per step, parameters go to the torch model gathered (sharding.py), only host 0 writes
  checkpoints (Trainer's `args.should_save`; every host reads one on resume), and a lost host stops the
  others with one message (watchdog.py);
* `bf16=True` runs the step under torchax's autocast with fp32 master weights (step.py).
"""

from __future__ import annotations

import logging
import time
import warnings

import jax
import numpy as np
import torch
from transformers import Trainer
from transformers.trainer_pt_utils import get_model_param_count
from transformers.trainer_utils import TrainOutput

from turbotrain.backends.xla.batches import BatchLayout, needed_shape, step_arrays
from turbotrain.backends.xla.host_data import host_dataloader
from turbotrain.backends.xla.hosts import claim_process_index, connect
from turbotrain.backends.xla.mesh import data_parallel_mesh, host_block, local_devices, replicated
from turbotrain.backends.xla.optimizer import TorchAdamWState, torch_adamw
from turbotrain.backends.xla.options import XlaOptions
from turbotrain.backends.xla.sharding import bytes_per_device, place, state_sharding, to_host
from turbotrain.backends.xla.state import TrainState, split_parameters, torch_moments, write_back
from turbotrain.backends.xla.step import CompiledStep
from turbotrain.backends.xla.watchdog import is_lost_peer, stop_process, watch_hosts
from turbotrain.boundaries import hf_boundary
from turbotrain.utils.warnings import warn_once

logger = logging.getLogger("turbotrain")
ADAMW_OPTIMS = ("adamw_torch", "adamw_torch_fused")
OVERRIDES_BYPASSED = ("training_step", "compute_loss")


def _overridden_outside_turbotrain(trainer_class: type, name: str) -> bool:
    """Whether `name` comes from a class other than Trainer and turbotrain's own (which only wrap Trainer's:
    the bf16 emulation's step, the signature-keeping `compute_loss`)."""
    for owner in trainer_class.__mro__:
        if name in vars(owner) and not owner.__module__.startswith("turbotrain."):
            return owner is not Trainer
    return False


def check_trainer(trainer: Trainer) -> None:
    """Refuse what the compiled step would silently ignore."""
    args = trainer.args
    if trainer.turbo_optim not in ADAMW_OPTIMS:  # the optimizer the run uses (args.optim, fused where it can be)
        raise ValueError(
            f"backend 'xla' trains with torch's AdamW semantics; optim={trainer.turbo_optim!r} is not supported "
            f"(use one of {ADAMW_OPTIMS})"
        )
    for name in OVERRIDES_BYPASSED:
        if _overridden_outside_turbotrain(type(trainer), name):
            raise ValueError(
                f"backend 'xla' computes the loss inside its compiled step; {type(trainer).__name__} "
                f"overrides {name}(), which it would bypass"
            )
    if trainer.compute_loss_func is not None or getattr(trainer, "label_smoother", None) is not None:
        raise ValueError(
            "backend 'xla' uses the model's own loss; compute_loss_func and label smoothing are not supported"
        )
    if args.fp16:
        raise ValueError("backend 'xla' trains in float32 or bf16 (bf16=True); fp16 mixed precision is not supported")
    if args.auto_find_batch_size:
        raise ValueError("backend 'xla' sets the batch per jax device itself; auto_find_batch_size is not supported")


class XlaRun:
    """One `train()` call on the xla backend."""

    def __init__(self, trainer: Trainer, options: XlaOptions):
        check_trainer(trainer)
        self.trainer = trainer
        self.options = options
        self.hosts = connect(options.host_timeout_s)  # before the first jax computation of this process
        self.mesh = data_parallel_mesh(options.num_devices)
        self.pending_losses: list = []
        self.state: TrainState | None = None
        self.step: CompiledStep | None = None
        self.state_bytes: dict[str, int] = {}
        self.written_at: int | None = None  # the global step whose weights the torch model holds

    @property
    def trainer_is_distributed(self) -> bool:
        """Trainer runs under torch.distributed (torchrun): it shards the data and counts items itself."""
        return self.trainer.args.world_size > 1

    def _layout(self, model) -> BatchLayout:
        report = self.trainer.turbo_report
        sparsity = report.label_sparsity if report is not None else None
        pad = getattr(model.config, "pad_token_id", None)
        return BatchLayout(
            rows=hf_boundary.train_batch_size(self.trainer),
            devices=len(local_devices(self.mesh)),
            pad_token_id=pad if pad is not None else 0,
            length_buckets=self.options.length_buckets,
            label_row_buckets=self.options.label_row_buckets,
            sparsity_causal=sparsity.head.causal if sparsity is not None else None,
            host_block=host_block(self.mesh),
        )

    def _build_step(self, model) -> CompiledStep:
        args, trainer = self.trainer.args, self.trainer
        trainable, frozen = split_parameters(model)
        self.hosts.check_same_weights(trainable)
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
        shardings = state_sharding(self.mesh, trainable, self.options.shard)
        step = CompiledStep(
            model,
            max_grad_norm,
            adamw,
            self.mesh,
            report.label_sparsity if report else None,
            self.options.matmul_precision,
            state_sharding=shardings,
            autocast_dtype=torch.bfloat16 if args.bf16 else None,
        )
        self.frozen = place(frozen, {name: replicated(self.mesh) for name in frozen})
        # every leaf placed like the step's outputs, or the second call would compile again
        self.state = place(TrainState(trainable, self._opt_state(model, trainable)), shardings)
        held = (self.state.params, self.state.opt_state.mu, self.state.opt_state.nu)
        self.state_bytes = {
            "state_bytes_per_device": bytes_per_device(held, local_devices(self.mesh)[0]),
            "state_bytes_replicated": 3 * sum(value.nbytes for value in trainable.values()),
        }
        return step

    def _opt_state(self, model, params: dict) -> TorchAdamWState:
        """AdamW's state as host arrays: zeros, or the checkpoint's moments when resuming."""
        moments = torch_moments(model, self.trainer.optimizer, list(params))
        if moments is None:
            count, mu, nu = 0, *({name: np.zeros_like(value) for name, value in params.items()} for _ in range(2))
        else:
            count, mu, nu = moments
        return TorchAdamWState(np.int32(count), mu, nu, np.float32(0.0))

    def write_back(self) -> None:
        """Copy the weights and AdamW moments into the torch model and optimizer (once per step at most)."""
        if self.written_at == self.trainer.state.global_step:
            return
        adam = self.state.opt_state
        params, count, mu, nu = to_host((self.state.params, adam.count, adam.mu, adam.nu))
        write_back(self.trainer.model, self.trainer.optimizer, params, count, mu, nu)
        self.written_at = self.trainer.state.global_step

    def _flush_loss(self) -> None:
        if self.pending_losses:
            hf_boundary.add_to_running_loss(self.trainer, sum(float(loss) for loss in self.pending_losses))
            self.pending_losses = []

    def run(self, batch_size, args, resume_from_checkpoint, trial, ignore_keys_for_eval) -> TrainOutput:
        trainer = self.trainer
        claim_process_index(args, self.hosts)  # before Trainer's state records which process is zero
        hf_boundary.set_train_batch_size(trainer, args.per_device_train_batch_size * len(local_devices(self.mesh)))
        dataloader = host_dataloader(
            trainer.get_train_dataloader(), self.hosts, host_block(self.mesh), self.trainer_is_distributed
        )
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
        warn_if_accelerator_idle(args.device, [d.platform for d in self.mesh.devices.flat])
        logger.info(
            "turbotrain xla: %d steps, batch %d over %d device(s) on %d host(s) %s, %d trainable parameters, "
            "shard=%s, %s bytes of parameters + AdamW per device",
            max_steps,
            hf_boundary.train_batch_size(trainer) * self.hosts.count,
            self.mesh.size,
            self.hosts.count,
            [d.platform for d in self.mesh.devices.flat][:1],
            get_model_param_count(trainer.model, trainable_only=True),
            self.options.shard,
            f"{self.state_bytes['state_bytes_per_device']:,}",
        )
        start_time = time.time()
        hf_boundary.start_loss_tracking(trainer)
        key = jax.random.key(args.seed)
        trainer.control = trainer.callback_handler.on_train_begin(args, trainer.state, trainer.control)
        try:
            with watch_hosts(self.hosts, self.options.host_timeout_s):
                for epoch in range(epochs_trained, num_train_epochs):
                    skip = skip_batches if epoch == epochs_trained and resume_from_checkpoint else 0
                    self._train_epoch(
                        step,
                        layout,
                        key,
                        dataloader,
                        epoch,
                        steps_in_epoch,
                        skip,
                        trial,
                        ignore_keys_for_eval,
                        start_time,
                    )
                    if trainer.control.should_training_stop:
                        break
                self._flush_loss()
                self.write_back()
        except jax.errors.JaxRuntimeError as error:
            if not (self.hosts.several and is_lost_peer(error)):
                raise
            what = f"a collective with the other hosts failed ({str(error).splitlines()[0][:160]})"
            stop_process(self.hosts.index, self.hosts.count, what)
        return hf_boundary.finalize_training(trainer, trial, num_train_samples, start_time)

    def _batches(self, dataloader, epoch: int, skip: int):
        from accelerate import skip_first_batches

        if hasattr(dataloader, "set_epoch"):
            dataloader.set_epoch(epoch)
        return iter(skip_first_batches(dataloader, skip) if skip else dataloader)

    def _step_arrays(self, micro_batches, layout, num_items) -> tuple[dict, int | None]:
        """This host's arrays for one step, shaped as every host's, and the global batch's item count."""
        length, labelled = needed_shape(micro_batches, layout)
        local_items = None if num_items is None else int(num_items)
        length, labelled, items = self.hosts.agree(
            length, labelled, local_items, items_are_global=self.trainer_is_distributed
        )
        arrays = step_arrays(micro_batches, layout, length, labelled)
        return arrays, None if num_items is None else items

    def _train_epoch(self, step, layout, key, dataloader, epoch, steps_in_epoch, skip, trial, ignore_keys, start_time):
        trainer, args = self.trainer, self.trainer.args
        control = trainer.control = trainer.callback_handler.on_epoch_begin(args, trainer.state, trainer.control)
        batches = self._batches(dataloader, epoch, skip)
        accumulation = args.gradient_accumulation_steps
        flos_share = 1 if self.trainer_is_distributed else self.hosts.count  # Trainer sums flos under torchrun
        seen, grad_norm, learning_rate = skip, None, None
        while True:
            micro_batches, num_items = trainer.get_batch_samples(batches, accumulation, args.device)
            if not micro_batches:
                break
            control = trainer.control = trainer.callback_handler.on_step_begin(args, trainer.state, control)
            learning_rate = hf_boundary.learning_rate(trainer)
            step_key = jax.random.fold_in(key, trainer.state.global_step)
            arrays, items = self._step_arrays(micro_batches, layout, num_items)
            self.state, loss, grad_norm = step(self.state, self.frozen, arrays, items, learning_rate, step_key)
            self.pending_losses.append(loss)
            for micro in micro_batches:
                trainer.current_flos += float(trainer.floating_point_ops(micro)) * flos_share
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
            self.write_back()  # on every host: gathering split parameters is a collective
        if control.should_save and not (self.trainer_is_distributed or trainer.args.should_save):
            control.should_save = False  # not this host's to write (Trainer without torch.distributed)
        norm = float(grad_norm) if (control.should_log and grad_norm is not None) else None
        hf_boundary.log_save_evaluate(trainer, norm, trial, epoch, ignore_keys, start_time, learning_rate)


def warn_if_accelerator_idle(device: torch.device, platforms: list[str]) -> None:
    """Say so where jax steps on the CPU while the model sits on an accelerator (a CPU-only jaxlib on a GPU machine:
    the run would train on the CPU, slowly, with the GPU idle)."""
    if device.type != "cpu" and platforms and all(platform == "cpu" for platform in platforms):
        warn_once(
            f"turbotrain: backend 'xla' steps on jax's CPU devices, while the model is on {device.type}: this jaxlib "
            "has no GPU support; install one that has (pip install 'jax[cuda12]' on NVIDIA GPUs) or choose "
            "backend='inductor'"
        )
