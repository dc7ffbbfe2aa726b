"""The boundary with Transformers: every private Transformers name turbotrain uses is used here, and only here.

Transformers renames and reshapes its private methods between releases (that is what broke Optimum's
`ORTTrainer` on every release). turbotrain needs a few of them, so they are confined to this module,
their signatures are pinned by `tests/test_hf_boundary.py`, and a test fails if a private name of
Transformers appears anywhere else in the package. Supported range: see the README ("Supported
versions"), proved by CI's run of the core tests against the oldest and the newest release.

Two kinds of use:

* `TrainerBoundary`, a mixin placed before a Trainer class, overrides Trainer's private hooks and
  forwards each to a public `turbo_*` method of the turbotrain mixin (`trainer.py`):
  `_get_train_sampler` -> `turbo_train_sampler`, `_get_num_items_in_batch` -> `turbo_count_batches`,
  `_track_num_input_tokens` -> `turbo_count_inputs`,
  `_inner_training_loop` -> `turbo_training_loop`, `_save_checkpoint` -> `turbo_checkpoint`.
* Functions for the parts of Trainer's loop that a backend with its own loop reuses (xla: state,
  resume, loss tracking, log/save/evaluate, finalize), and single private attributes
  (`attention_implementation`; `set_attention_implementation` switches it through the public
  `set_attn_implementation`, for padding-free's packed attention), and the decoder inputs a sequence-to-sequence model builds from its labels
  (`decoder_input_ids_from_labels`), and which engine shards the parameters, FSDP or DeepSpeed ZeRO-3
  (`sharding_engine`: each parameter a shard; passes that cannot serve it refuse, naming it).
"""

from __future__ import annotations

import contextlib
import os
import sys

import torch
from transformers import Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

LOOP_PARTS = (
    "_init_training_state",
    "_prepare_for_training",
    "_finalize_training",
    "_maybe_log_save_evaluate",
    "_track_num_input_tokens",
    "_get_learning_rate",
    "set_initial_training_values",
    "get_batch_samples",
)


class TrainerBoundary:
    """Trainer's private hooks, forwarded to public `turbo_*` methods (which the turbotrain mixin defines)."""

    def _get_train_sampler(self, train_dataset=None):
        sampler = self.turbo_train_sampler(train_dataset if train_dataset is not None else self.train_dataset)
        return sampler if sampler is not None else super()._get_train_sampler(train_dataset)

    def _get_num_items_in_batch(self, batch_samples, device):
        return super()._get_num_items_in_batch(self.turbo_count_batches(batch_samples), device)

    def _track_num_input_tokens(self, inputs):
        return super()._track_num_input_tokens(self.turbo_count_inputs(inputs))

    def _inner_training_loop(
        self, batch_size=None, args=None, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None
    ):
        loop = self.turbo_training_loop()
        inner = loop if loop is not None else super()._inner_training_loop
        return inner(batch_size, args, resume_from_checkpoint, trial, ignore_keys_for_eval)

    def _save_checkpoint(self, model, trial) -> None:
        output_dir = self._get_output_dir(trial=trial)
        folder = os.path.join(output_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        with self.turbo_checkpoint(folder, output_dir), _rotation_deferred(self.args):
            super()._save_checkpoint(model, trial)


@contextlib.contextmanager
def _rotation_deferred(args):
    """Trainer's `_save_checkpoint` ends by deleting the checkpoints beyond `args.save_total_limit`, before
    turbotrain's commit of the new one (a kill then could leave none complete); Trainer reads the limit from
    the arguments and has no hook to defer that rotation, so the limit reads None for the length of
    Trainer's save only, and `turbo_checkpoint` rotates with the user's limit after the commit. The one
    place turbotrain writes the user's arguments, and it puts the value back."""
    limit, args.save_total_limit = args.save_total_limit, None
    try:
        yield
    finally:
        args.save_total_limit = limit


def rotate_checkpoints(trainer: Trainer, output_dir: str) -> None:
    """Delete the checkpoints beyond `save_total_limit` by Transformers' own rule (newest by mtime kept)."""
    try:
        from transformers.trainer_utils import rotate_checkpoints as rotate  # 5.2 and later
    except ImportError:  # 5.0 and 5.1: a private Trainer method
        trainer._rotate_checkpoints(use_mtime=True, output_dir=output_dir)
        return
    rotate(
        output_dir=output_dir,
        save_total_limit=trainer.args.save_total_limit,
        best_model_checkpoint=trainer.state.best_model_checkpoint,
        use_mtime=True,
    )


def missing_loop_parts() -> list[str]:
    """Trainer methods a backend with its own loop needs that this Transformers release lacks."""
    return [name for name in LOOP_PARTS if not callable(getattr(Trainer, name, None))]


def counts_input_tokens_by_hook() -> bool:
    """Whether Trainer counts `num_input_tokens_seen` in an overridable method (`_track_num_input_tokens`, 5.3 and
    later; `TrainerBoundary` hands it the padded batch's count) rather than inline in its loop."""
    return callable(getattr(Trainer, "_track_num_input_tokens", None))


def attention_implementation(config) -> str | None:
    """The attention implementation the model was built with ("sdpa", "eager", "flash_attention_2"...)."""
    return getattr(config, "_attn_implementation", None)


def set_attention_implementation(model: torch.nn.Module, name: str) -> bool:
    """Switch `model` (a Transformers model) to the registered attention `name` through its public
    `set_attn_implementation`; whether its config now reads `name` (False where the model cannot switch)."""
    try:
        model.set_attn_implementation(name)
    except (ValueError, ImportError, AttributeError):
        return False
    return attention_implementation(model.config) == name


def decoder_input_ids_from_labels(model: torch.nn.Module, labels: torch.Tensor) -> torch.Tensor | None:
    """The `decoder_input_ids` a seq2seq model builds from `labels` [B, T] when given none, or None if unknown.

    The model's public `prepare_decoder_input_ids_from_labels` (T5, BART, Marian...) where it has one;
    otherwise the `shift_tokens_right(labels, pad_token_id, decoder_start_token_id)` of the model's own
    modeling module (or its base class's: Whisper's forward calls that function, and defines no prepare method).
    """
    prepare = getattr(model, "prepare_decoder_input_ids_from_labels", None)
    if callable(prepare):
        return prepare(labels=labels)
    modules = (sys.modules.get(cls.__module__) for cls in type(model).__mro__)  # a user's subclass too
    shift = next((m.shift_tokens_right for m in modules if callable(getattr(m, "shift_tokens_right", None))), None)
    config = getattr(model, "config", None)
    if not callable(shift) or getattr(config, "decoder_start_token_id", None) is None:
        return None
    return shift(labels, config.pad_token_id, config.decoder_start_token_id)


def decay_parameter_names(model: torch.nn.Module) -> list[str]:
    """Trainer's rule for which parameters get weight decay (not biases, not norms), without a Trainer."""
    return Trainer.get_decay_parameter_names(None, model)


# --- the parts of Trainer's training loop a backend with its own loop reuses (xla) ---------------------


def set_train_batch_size(trainer: Trainer, rows: int) -> None:
    trainer._train_batch_size = rows


def train_batch_size(trainer: Trainer) -> int:
    return trainer._train_batch_size


def init_training_state(
    trainer: Trainer, max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
) -> tuple[int, int]:
    """(epochs_trained, batches to skip): Trainer's state, callbacks and resume bookkeeping."""
    return trainer._init_training_state(
        max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
    )


def prepare_for_training(trainer: Trainer, max_steps, dataloader, resume_from_checkpoint):
    """(model, dataloader): Trainer's optimizer, scheduler and accelerator setup, loaded on resume."""
    return trainer._prepare_for_training(max_steps, dataloader, resume_from_checkpoint)


def start_loss_tracking(trainer: Trainer) -> None:
    """What Trainer's loop sets before its first step: the running loss and the last-logged step."""
    trainer._initial_num_input_tokens_seen = trainer.state.num_input_tokens_seen
    trainer._initial_global_step = trainer.state.global_step
    trainer._tr_loss = torch.tensor(0.0)
    trainer._total_loss_scalar = 0.0
    trainer._globalstep_last_logged = trainer.state.global_step


def add_to_running_loss(trainer: Trainer, loss: float) -> None:
    trainer._tr_loss += loss


def learning_rate(trainer: Trainer) -> float:
    return trainer._get_learning_rate()


def track_input_tokens(trainer: Trainer, batch) -> None:
    trainer._track_num_input_tokens(batch)


def log_save_evaluate(trainer: Trainer, grad_norm, trial, epoch, ignore_keys, start_time, learning_rate) -> None:
    trainer._maybe_log_save_evaluate(
        trainer._tr_loss, grad_norm, trainer.model, trial, epoch, ignore_keys, start_time, learning_rate=learning_rate
    )


def finalize_training(trainer: Trainer, trial, num_train_samples, start_time):
    return trainer._finalize_training(trial, num_train_samples, start_time)


def sharding_engine(trainer: Trainer) -> str | None:
    """The engine that shards this run's parameters, by name ("DeepSpeed ZeRO-3", "FSDP2", "FSDP"), or None."""
    if getattr(trainer, "is_fsdp_enabled", False):
        plugin = getattr(getattr(getattr(trainer, "accelerator", None), "state", None), "fsdp_plugin", None)
        return "FSDP2" if getattr(plugin, "fsdp_version", 1) == 2 else "FSDP"
    if not getattr(trainer, "is_deepspeed_enabled", False):
        return None
    from transformers.integrations import is_deepspeed_zero3_enabled

    return "DeepSpeed ZeRO-3" if is_deepspeed_zero3_enabled() else None
