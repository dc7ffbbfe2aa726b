"""`TurboTrainer` and `turbo(TrainerClass)`: a Trainer with turbotrain's passes and backends, nothing else changed.

`TurboMixin` is placed before a `transformers.Trainer` class (`TurboTrainer` is `turbo(Trainer)`). It hooks in
only through Trainer's overridable methods and never copies the training loop; Trainer's private hooks are
reached through `hf_boundary.TrainerBoundary`, which forwards them to the public `turbo_*` methods here:

* `__init__`: a registered integration's `hand_over` first (TRL's SFTTrainer is given turbo arguments of another
  class as a `TurboSFTConfig`, integrations/trl/arguments.py); after the Trainer class has built itself (TRL may
  have wrapped the model with PEFT), the trainer's `TrainerFacts` (`turbo_trainer_facts`), the backend and the
  effective options (docs/architecture.md, "Options flow one way"), the fused AdamW (`turbo_optim`, handed to
  `create_optimizer`; the arguments keep their `optim`), and the passes installed (`optimize`, self-checks under
  the run's autocast with their backward). Hidden callbacks (hidden_callbacks.py, out of the public list): the
  output folder checked when training begins if the run will save (`WritableOutput`), the backend's, the CPU
  thread choice (`ThreadsCallback`; the user's `OMP_NUM_THREADS` stands), and the one summary line
  (training/run_summary.py, also to the `report_to` trackers); an fp32 CPU run gets one line on bf16
  (bf16_hint.py); a bf16 CPU run decides `bf16_emulation` once and runs `training_step` and `prediction_step`
  inside `Bf16Emulation` where it is on; without an accelerator torch's pin_memory notice is silenced.
* `call_model_init`: the same passes on every model `model_init` makes (hyperparameter search).
* `get_train_dataloader`: training batches checked first (batch_checks.py: named in one line before any step),
  then through the installed passes' collator steps (`OptimizeReport.collator`; not where accelerate dispatches
  the batches, an IterableDataset's by default: said once, `dispatched_batches`); evaluation and prediction keep
  the user's collator, so `compute_metrics` sees padded, full logits.
* `turbo_train_sampler`: with `max_tokens_per_batch`, a token-budget batch sampler (token_budget.py).
* `turbo_count_batches`: Trainer counts the loss's items on the padded labels packed batches carry (the stock count);
  `turbo_count_inputs`: its `num_input_tokens_seen` and `floating_point_ops` (`total_flos`) on their padded
  attention mask (the stock counts).
* `turbo_training_loop`: a backend that cannot run inside Trainer's loop (xla) supplies its own.
* `turbo_checkpoint` / `train(resume_from_checkpoint=...)`: a checkpoint is committed only once fully on disk
  (sizes and checksums), resuming skips one cut off or damaged (checkpoints.py), a full disk is named in one line.

Callbacks, logging, evaluation, checkpoints, `save_pretrained` output, gradient accumulation, fp16/bf16 and
`hyperparameter_search` are Trainer's own. Every Trainer method overridden here keeps Trainer's signature and kind
(`__init__` shows the Trainer class's own signature), pinned by tests/test_trainer_signatures.py.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.metadata
import logging

import torch
from accelerate.utils import DistributedType
from torch import nn
from transformers import Seq2SeqTrainer, Trainer
from transformers.training_args import OptimizerNames

from turbotrain.args import TurboOptions, TurboTrainingArguments
from turbotrain.backends import get_backend
from turbotrain.boundaries.hf_boundary import TrainerBoundary, rotate_checkpoints
from turbotrain.passes import OptimizeReport, optimize, resolve_optim_name
from turbotrain.passes.registry import StepPlace, TrainerFacts, trainer_refusals
from turbotrain.passes.self_check import RunPrecision, run_precision
from turbotrain.training import batch_checks, bf16_emulation, checkpoints, token_budget
from turbotrain.training.bf16_hint import bf16_hint, wants_hint
from turbotrain.training.hidden_callbacks import HiddenCallbacks, ThreadsCallback
from turbotrain.training.run_summary import SummaryCallback, active_labels, emulation_note, not_active, summary_line
from turbotrain.training.token_budget import TokenBudgetBatchSampler, example_lengths
from turbotrain.utils.batch_keys import PADDED_LABELS, PADDED_MASK
from turbotrain.utils.freed_memory import release_freed_memory
from turbotrain.utils.threads import OtherWork
from turbotrain.utils.warnings import log_once, quiet_cpu_pin_memory

logger = logging.getLogger("turbotrain")
_INTEGRATIONS: list[tuple] = []  # (facts, mixins) of each trainer library's table: `register_integration`
_HAND_OVERS: list = []  # each integration's `hand_over(trainer_class, args, kwargs)`, asked before Trainer's __init__


INTEGRATION_ENTRY_POINTS = "turbotrain.integrations"  # pyproject.toml: `<library> = "<package registering its table>"`
_LOADED_LIBRARIES: set[str] = set()


@functools.cache
def integration_entry_points() -> dict:
    """The declared tables by library name, read from turbotrain's installed metadata once."""
    return {entry.name: entry for entry in importlib.metadata.entry_points(group=INTEGRATION_ENTRY_POINTS)}


def load_integrations(trainer_class: type) -> None:
    """Import the table of every trainer library `trainer_class` is built on, once per library: the entry points
    of the group `turbotrain.integrations` named after a top-level package in its MRO (turbotrain's own:
    `trl = "turbotrain.integrations.trl"`, pyproject.toml). So `turbo()` and `TurboMixin` know TRL's trainers
    however they were imported (`turbotrain.trainer.turbo` too, not only the lazy front's), and a library's
    trainer built on `TurboTrainer` (`turbotrain run`) too. The trainer layer reads the table's name from the
    metadata, never imports the integrations layer by name (docs/architecture.md, "Layers")."""
    libraries = {(getattr(base, "__module__", None) or "").partition(".")[0] for base in trainer_class.__mro__}
    libraries -= _LOADED_LIBRARIES
    if not libraries:
        return
    entries = integration_entry_points()
    if not entries and not _INTEGRATIONS:
        _say_no_metadata(libraries)
    for library in sorted(libraries & set(entries)):
        entries[library].load()  # a table that fails to import raises here, and again at the next call
    _LOADED_LIBRARIES.update(libraries)


def _say_no_metadata(libraries: set[str]) -> None:
    """turbotrain runs from a source folder (or an install older than its entry points): an installed trainer
    library's class gets no table unless `turbotrain.turbo` was imported, which registers them; said once."""
    installed = sorted(libraries & set(importlib.metadata.packages_distributions()) - {"transformers", "turbotrain"})
    if installed:
        logger.warning(
            "turbotrain: its installed metadata declares no trainer-library tables (entry points '%s': run from a "
            "source folder, or installed before they existed), so %s's trainers get none here; import turbo from "
            "turbotrain (turbotrain.turbo), or reinstall: pip install -e .",
            INTEGRATION_ENTRY_POINTS,
            ", ".join(installed),
        )


def register_integration(facts, mixins, hand_over=None) -> None:
    """A trainer library's table (integrations/trl/): `facts(trainer)`, the `TrainerFacts` of a trainer it knows
    (else None), `mixins(trainer_class)`, the classes `turbo()` puts before TurboMixin for it, and `hand_over`, the
    constructor's arguments as that library's trainer must be given them (TRL's SFTTrainer: turbo arguments as a
    `TurboSFTConfig`, integrations/trl/arguments.py)."""
    _INTEGRATIONS.append((facts, mixins))
    if hand_over is not None:
        _HAND_OVERS.append(hand_over)


def dispatched_batches(accelerator, dataset) -> bool:
    """Whether accelerate will dispatch the training batches (process 0 fetches one per process, concatenates and
    slices them on their first dimension): asked for, or by default for a torch IterableDataset placed on device."""
    dispatch = accelerator.dispatch_batches
    if dispatch is None:  # accelerate's own default (Accelerator.prepare_data_loader: no placement under torch_xla)
        placed = accelerator.device_placement and accelerator.distributed_type != DistributedType.XLA
        dispatch = placed and isinstance(dataset, torch.utils.data.IterableDataset)
    return bool(dispatch)


class TurboMixin(TrainerBoundary):
    """turbotrain's part of a Trainer class; see the module docstring for what it changes."""

    turbo_report: OptimizeReport | None = None
    turbo_dispatched = False  # accelerate dispatches the training batches: the passes' collator steps stay out
    turbo_reference = None  # DPOTrainer's separate reference model's pass (label_sparsity/reference_calls.py), or None

    def __init__(self, *args, **kwargs):
        self._turbo_ready = False
        load = OtherWork()  # other processes' CPU time from here on: the thread choice's first window
        load_integrations(type(self))  # a library's trainer subclassing TurboTrainer (turbotrain run) has its table
        for hand_over in _HAND_OVERS:  # TRL's SFTTrainer would rebuild turbo arguments and fail
            args, kwargs = hand_over(type(self), args, kwargs)
        super().__init__(*args, **kwargs)
        self.turbo_facts = self.turbo_trainer_facts()  # once: what this trainer's loss asks of the passes
        requested = TurboOptions.from_args(self.args)
        self.backend = get_backend(requested.backend, requested.backend_options)
        self.backend.check_available(self.args)
        self.turbo_requested = requested
        usable = requested.without(self.backend.turns_off, self.backend.name)
        refused_here = trainer_refusals(self, usable, self.turbo_facts)  # e.g. label smoothing reads the logits
        self.turbo_options = usable.switched_off(refused_here)
        by_backend = {
            name: f"not used with backend {self.backend.name}: {why}" for name, why in self.backend.turns_off.items()
        }
        self.turbo_refused = {**by_backend, **refused_here}
        self.turbo_optim = resolve_optim_name(self.args.optim, self.args.device, self.turbo_options.fused_optimizer)
        self._turbo_ready = True
        if self.model is not None and self.turbo_report is None:
            self.model = self.model_wrapped = self._prepare_model(self.model)
            # a TRL trainer's reference model, its fused calls answered as the policy's (label sparsity's pass)
            self.turbo_reference = getattr(self.turbo_report.label_sparsity, "reference", None)
            release_freed_memory()  # what the self-checks freed goes back to the system before training
        self.turbo_threads = ThreadsCallback(self.args.device.type == "cpu", load)  # chosen before the summary
        # out of the public list; the output folder checked first, before the summary line
        hidden = [checkpoints.WritableOutput(), *self.backend.callbacks(), self.turbo_threads, SummaryCallback(self)]
        self.callback_handler = HiddenCallbacks.around(self.callback_handler, hidden)
        if wants_hint(self.args):
            log_once(bf16_hint(), logging.WARNING)
        self.turbo_bf16_emulation = self._turbo_decide_emulation()
        quiet_cpu_pin_memory()

    def _turbo_decide_emulation(self) -> bool:
        """Emulate bf16 matmuls in fp32 GEMMs (bf16_emulation.py)? Only a bf16 CPU run asks; one line logged."""
        if not (self.args.bf16 and self.args.device.type == "cpu"):
            return False
        setting = self.turbo_options.bf16_emulation
        on, measured = bf16_emulation.decide(setting)
        if measured is not None or setting != "auto":
            log_once(bf16_emulation.decision_line(on, measured, setting), logging.WARNING)
        return on

    def _turbo_emulating(self):
        return bf16_emulation.Bf16Emulation() if self.turbo_bf16_emulation else contextlib.nullcontext()

    def training_step(self, *args, **kwargs):
        """Trainer's step, inside the bf16 emulation where it is on: forward and backward both, so gradient
        checkpointing's recomputation (run in the backward) is emulated as its forward was."""
        with self._turbo_emulating(), self._turbo_forwards_end_on_error():
            return super().training_step(*args, **kwargs)

    def prediction_step(self, *args, **kwargs):
        with self._turbo_emulating(), self._turbo_forwards_end_on_error():
            return super().prediction_step(*args, **kwargs)

    @contextlib.contextmanager
    def _turbo_forwards_end_on_error(self):
        """A step that raises (an out-of-memory that `auto_find_batch_size` retries smaller) leaves no pass state
        behind for the next forward: a compiled forward that raises skips the passes' closing hooks."""
        try:
            yield
        except BaseException:
            try:
                if self.turbo_report is not None:
                    self.turbo_report.end_forward()
            except Exception:  # noqa: BLE001  (the step's own error is the one to raise: auto_find_batch_size's)
                logger.exception("turbotrain: ending the passes' forward state after a failed step raised too")
            raise

    def turbo_summary(self) -> str:
        """The run's one-line summary (training/run_summary.py): backend, active passes, optimizer, what is not active and why."""
        report = self.turbo_report if self.turbo_report is not None else OptimizeReport("")
        engine = report.sharded_by
        requested, refused, lacks = self.turbo_requested, self.turbo_refused, report.not_applicable
        missing = not_active(requested, self.turbo_options, report.applied, refused, report.skipped, lacks, engine)
        line = summary_line(self.backend.summary(), active_labels(report), self.turbo_optim, missing)
        threads = getattr(self, "turbo_threads", None)
        chosen = f"; {threads.choice.line()}" if threads is not None and threads.choice is not None else ""
        as_made = "; training batches as collated (accelerate dispatches them)" if self.turbo_dispatched else ""
        return line + emulation_note(getattr(self, "turbo_bf16_emulation", False)) + as_made + chosen

    def create_optimizer(self, *given, **named):
        """Trainer's optimizer, made with `optim` the one this run uses (the fused AdamW where the device has it:
        `turbo_optim`); the user's arguments keep their own `optim`. Trainer's `get_optimizer_cls_and_kwargs`
        stays its static method (a subclass's override too): it is asked once, with a copy of the arguments, and
        its answer handed to Trainer's `create_optimizer` as `optimizer_cls_and_kwargs` for that call only.
        Trainer's parameters pass through as given (5.0 takes none, later releases a `model`)."""
        model = given[0] if given else named.get("model")
        if self.optimizer is not None or getattr(self, "optimizer_cls_and_kwargs", None) is not None:
            return super().create_optimizer(*given, **named)
        if getattr(self, "turbo_optim", None) in (None, getattr(self.args.optim, "value", self.args.optim)):
            return super().create_optimizer(*given, **named)
        args = copy.copy(self.args)
        args.optim = OptimizerNames(self.turbo_optim)
        self.optimizer_cls_and_kwargs = self.get_optimizer_cls_and_kwargs(args, self.model if model is None else model)
        try:
            return super().create_optimizer(*given, **named)
        finally:
            self.optimizer_cls_and_kwargs = None

    def turbo_trainer_facts(self) -> TrainerFacts:
        """What this trainer's loss asks of the passes: a registered integration's answer (a TRL trainer's row),
        else Trainer's (its loss a sum over tokens where `compute_loss` is Trainer's own)."""
        found = (facts(self) for facts, _ in _INTEGRATIONS)
        own = TrainerFacts(sums_tokens=type(self).compute_loss is Trainer.compute_loss)
        return next((facts for facts in found if facts is not None), own)

    def _prepare_model(self, model: nn.Module) -> nn.Module:
        with run_precision(RunPrecision.of_arguments(self.args)):  # self-checks run as the run computes
            self.turbo_report = optimize(model, options=self.turbo_options, facts=self.turbo_facts)
        return self.backend.wrap_model(model)

    def call_model_init(self, trial=None) -> nn.Module:
        model = super().call_model_init(trial)
        # during Trainer.__init__ the options are not read yet; __init__ prepares that model afterwards
        return self._prepare_model(model) if self._turbo_ready else model

    def _turbo_train_collator(self):
        """The collator the training dataloader uses: the user's through each installed pass's collator step, for
        a step on this run's device, inside Trainer's loop unless the backend owns its loop; None for the user's."""
        report, inner = self.turbo_report, self.data_collator
        if report is None or inner is None:
            return None
        collator = report.collator(inner, StepPlace(self.args.device, in_trainer_loop=not self.backend.owns_loop))
        return None if collator is inner else collator

    def _turbo_dispatched(self) -> bool:
        """Whether accelerate dispatches the training batches, where the passes' collator steps stay out (said once)."""
        if not dispatched_batches(self.accelerator, self.train_dataset):
            return False
        log_once(
            "turbotrain: training batches stay as the collator made them (padding-free left them padded, label "
            "rows are found in the model): accelerate dispatches an IterableDataset's batches, concatenating and "
            "slicing them along their first dimension, which packed rows and their sequence index cannot take; "
            "TrainingArguments(accelerator_config={'dispatch_batches': False}) lets each process build its own",
            logging.WARNING,
        )
        return True

    def get_train_dataloader(self):
        user_collator = self.data_collator
        own_loss = type(self).compute_loss is Trainer.compute_loss and getattr(self, "compute_loss_func", None) is None
        if self.turbo_options.max_tokens_per_batch is not None:
            token_budget.require_map_style(self.train_dataset)
        self.turbo_dispatched = self._turbo_dispatched()
        try:  # innermost, before the passes' steps: a bad batch named in one line (batch_checks.py)
            self.data_collator = batch_checks.checked_collator(user_collator, self.model, own_loss)
            if not self.turbo_dispatched:
                self.data_collator = self._turbo_train_collator() or self.data_collator
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

    def turbo_count_inputs(self, inputs: dict) -> dict:
        """The batch Trainer counts `num_input_tokens_seen` on: a packed one as its padded inputs were (the padded
        mask in the main input's place, so "all" counts padded tokens, "non_padding" real ones, as stock)."""
        if PADDED_MASK not in inputs:
            return inputs
        mask, name = inputs[PADDED_MASK], getattr(self.model, "main_input_name", "input_ids")
        return {**({name: mask} if name in inputs else {}), "attention_mask": mask}  # stock counts none without it

    def floating_point_ops(self, inputs: dict) -> int:
        """Trainer's estimate (6 x main input's tokens x parameters) on the padded inputs, as stock's `total_flos`."""
        return super().floating_point_ops(self.turbo_count_inputs(inputs))

    def turbo_training_loop(self):
        """The backend's own loop (same arguments as Trainer's inner loop), or None to keep Trainer's."""
        return self.backend.training_loop(self)

    @contextlib.contextmanager
    def turbo_checkpoint(self, folder: str, output_dir: str):
        """Around Trainer's save of `folder` (its own rotation deferred by the boundary): begin, then commit once on
        disk, then rotate old checkpoints."""
        with checkpoints.disk_full_named(folder):  # a full disk named in one line, the folder left cut off
            if self.args.should_save:
                checkpoints.begin(folder)
            yield
            if self.args.should_save:
                checkpoints.commit(folder)
                rotate_checkpoints(self, output_dir)

    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None):
        resume_from_checkpoint = checkpoints.resume_checkpoint(resume_from_checkpoint, self.args.output_dir)
        return super().train(
            resume_from_checkpoint=resume_from_checkpoint, trial=trial, ignore_keys_for_eval=ignore_keys_for_eval
        )


def _like(trainer_class: type[Trainer], name: str):
    """TurboMixin's method `name` with `trainer_class`'s signature and docstring for `inspect` (its `__wrapped__`)."""
    method = getattr(TurboMixin, name)

    @functools.wraps(getattr(trainer_class, name))
    def wrapper(self, *args, **kwargs):
        return method(self, *args, **kwargs)

    return wrapper


# TurboMixin's methods whose parameters differ between Trainer classes and releases: each class gets its own signature
WRAPPED_STEPS = ("training_step", "prediction_step", "create_optimizer")


class TurboTrainer(TurboMixin, Trainer):
    """Drop-in replacement for `transformers.Trainer`; see the module docstring for what it changes."""

    training_step = _like(Trainer, "training_step")
    prediction_step = _like(Trainer, "prediction_step")
    create_optimizer = _like(Trainer, "create_optimizer")

    @functools.wraps(Trainer.__init__)  # Trainer's signature (inspect.signature follows __wrapped__)
    def __init__(self, model=None, args=None, *rest, **kwargs):
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
    load_integrations(trainer_class)  # before the lookup: a table may make the class while it is imported
    if trainer_class not in _TRAINER_CLASSES:
        name = f"Turbo{trainer_class.__name__}"
        namespace = {
            "__module__": __name__,
            "__qualname__": name,
            "__doc__": f"`{trainer_class.__name__}` with turbotrain's passes and backends (`turbo()`).",
        }
        namespace.update({step: _like(trainer_class, step) for step in ("__init__", *WRAPPED_STEPS)})
        bases = (*(mixin for _, mixins in _INTEGRATIONS for mixin in mixins(trainer_class)), TurboMixin)
        _TRAINER_CLASSES[trainer_class] = type(name, (*bases, trainer_class), namespace)
    return _TRAINER_CLASSES[trainer_class]


TurboSeq2SeqTrainer = turbo(Seq2SeqTrainer)  # was: Seq2SeqTrainer (with TurboSeq2SeqTrainingArguments)
