"""`TurboTrainingArguments`: `transformers.TrainingArguments` plus turbotrain's options (`TurboOptions`).

Everything TrainingArguments accepts keeps its meaning. turbotrain's options are declared once, in
`TurboOptions` (a frozen dataclass: name, type, default, help); `TurboTrainingArguments` carries the
same fields, so they work as keyword arguments, in `to_dict()` and on the command line
(`HfArgumentParser`). They flow one way: the arguments are checked once at construction (values,
types, and `backend_options` against the chosen backend's typed options class), the trainer reads them
once (`TurboOptions.from_args`) and computes the effective options for its backend (`without`);
nobody writes them back. What each option does is documented where it is implemented; the README's
option table links there.

`optim="adamw_ort_fused"` (ORTTrainer's name) is accepted as the fused AdamW.
"""

from __future__ import annotations

import logging
import os
from dataclasses import MISSING, dataclass, field, fields, replace

import torch
from transformers import Seq2SeqTrainingArguments, TrainingArguments

from turbotrain.backends import AUTO, resolve_backend_name, valid_choices
from turbotrain.backends.registry import options_class_for
from turbotrain.passes.chunked_ce import MODES as CHUNKED_CE_MODES
from turbotrain.passes.fused_optimizer import ORT_FUSED_ALIAS

logger = logging.getLogger("turbotrain")
OFF_VALUES = {"chunked_cross_entropy": "never"}  # what "off" is for the options that are not plain switches
SWITCHES = (
    "label_sparsity",
    "fused_optimizer",
    "padding_free",
    "padding_free_with_dropout",
    "embedding_grad",
    "fused_activation",
)


def _help(text: str) -> dict:
    return {"help": text}


@dataclass(frozen=True)
class TurboOptions:
    """turbotrain's options of one run; plain TrainingArguments get the defaults."""

    backend: str = field(
        default=AUTO,
        metadata=_help(
            "What executes the step: 'auto' (eager or inductor, whichever measures faster on the run's own steps, "
            "cached per machine; backends/auto.py), 'eager', 'inductor', 'onnxruntime', 'xla' (turbotrain/backends/)."
        ),
    )
    backend_options: dict | None = field(
        default=None,
        metadata=_help(
            "Options of the chosen backend: auto (min_steps, measure_steps, cache, scope), inductor (scope: 'model' or "
            "'blocks'), onnxruntime (providers, cache_dir, check_first_run, session_options), xla (num_devices, "
            "length_buckets, label_row_buckets, matmul_precision); unknown keys are an error."
        ),
    )
    label_sparsity: bool = field(
        default=True,
        metadata=_help(
            "Compute the output head and loss only on rows whose label is not -100 (exact; passes/label_sparsity.py)."
        ),
    )
    fused_optimizer: bool = field(
        default=True,
        metadata=_help(
            "Use the fused AdamW kernel where the device has one, foreach otherwise (exact; passes/fused_optimizer.py)."
        ),
    )
    padding_free: bool = field(
        default=True,
        metadata=_help(
            "Pack padded training batches into rows with per-sequence attention, where the model is supported and "
            "the collator pads (exact without dropout; passes/padding_free.py)."
        ),
    )
    padding_free_with_dropout: bool = field(
        default=False,
        metadata=_help(
            "Pack padded batches also for a model that trains with dropout. Off by default: packed rows draw other "
            "dropout masks than the padded batch, so losses follow stock's in distribution, not step by step."
        ),
    )
    padding_free_row_tokens: str = field(
        default="auto",
        metadata=_help(
            "Tokens per packed row with packed attention (no mask, no C^2 cost per row): 'auto' (the whole batch in "
            "one row), 'longest' (rows as long as the longest sequence), or a number (passes/packing.py)."
        ),
    )
    padding_free_attention: str = field(
        default="packed",
        metadata=_help(
            "How packed rows attend within each sequence: 'packed' (the packed-attention function where the model "
            "can use it, masks otherwise; passes/packed_attention.py) or 'masks' (per-layer attention masks only)."
        ),
    )
    embedding_grad: bool = field(
        default=True,
        metadata=_help(
            "Accumulate the input embedding's gradient into a persistent buffer instead of a fresh vocabulary-sized "
            "tensor every step (exact; passes/embedding_grad.py)."
        ),
    )
    chunked_cross_entropy: str = field(
        default="auto",
        metadata=_help(
            "With label sparsity, compute the head and loss on the kept rows in chunks, never all logits at once: "
            "'auto' (when the kept logits would pass 64 MB), 'always', 'never' (exact; passes/chunked_ce.py)."
        ),
    )
    fused_activation: bool = field(
        default=True,
        metadata=_help(
            "Run Transformers' op-by-op tanh GELU (gelu_new, gelu_fast: GPT-2 and kin) as one fused kernel "
            "(exact within float rounding; passes/fused_activation.py)."
        ),
    )
    max_tokens_per_batch: int | None = field(
        default=None,
        metadata=_help(
            "Fill each training batch with examples up to this many tokens, instead of per_device_train_batch_size "
            "examples (data/token_budget.py; pairs well with padding_free)."
        ),
    )

    @classmethod
    def from_args(cls, args: TrainingArguments) -> TurboOptions:
        if not isinstance(args, TurboArgumentsMixin):
            return cls()
        names = attribute_names(type(args))
        return cls(**{f.name: getattr(args, names[f.name]) for f in fields(cls)})

    def validate(self) -> None:
        if self.backend not in valid_choices():
            raise ValueError(f"unknown backend '{self.backend}'; valid backends: {', '.join(valid_choices())}")
        for name in SWITCHES:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.chunked_cross_entropy not in CHUNKED_CE_MODES:
            raise ValueError(
                f"chunked_cross_entropy must be one of {', '.join(CHUNKED_CE_MODES)}, "
                f"got {self.chunked_cross_entropy!r}"
            )
        row_tokens = str(self.padding_free_row_tokens)
        if row_tokens not in ("auto", "longest") and not (row_tokens.isdigit() and int(row_tokens) > 0):
            raise ValueError(f"padding_free_row_tokens must be 'auto', 'longest' or a number, got {row_tokens!r}")
        if self.padding_free_attention not in ("packed", "masks"):
            raise ValueError(f"padding_free_attention must be 'packed' or 'masks', got {self.padding_free_attention!r}")
        budget = self.max_tokens_per_batch
        if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 1):
            raise ValueError(f"max_tokens_per_batch must be a positive whole number of tokens, got {budget!r}")
        if budget is not None:
            from turbotrain.data.token_budget import require_support

            require_support()
        if self.backend_options is not None and not isinstance(self.backend_options, dict):
            raise ValueError(f"backend_options must be a dict, got {self.backend_options!r}")
        for options_class in options_class_for(self.backend):
            options_class.from_dict(self.backend_options, self.backend)

    def row_tokens(self) -> int | str:
        """`padding_free_row_tokens` as packing takes it: "auto", "longest" or an int."""
        value = str(self.padding_free_row_tokens)
        return int(value) if value.isdigit() else value

    def backend_for(self, device: torch.device) -> str:
        return resolve_backend_name(self.backend, device)

    def without(self, turned_off: dict[str, str], backend: str) -> TurboOptions:
        """These options with the ones a backend cannot use switched off (each said once in the log)."""
        off = {name: reason for name, reason in turned_off.items() if getattr(self, name) not in (False, "never")}
        for name, reason in off.items():
            logger.info("turbotrain %s: %s is not used with this backend (%s)", backend, name, reason)
        return replace(self, **{name: OFF_VALUES.get(name, False) for name in off})


def _cpu_only_multiprocess() -> bool:
    """Launched as several processes (torchrun, accelerate launch) on a machine with no GPU."""
    return (
        int(os.environ.get("WORLD_SIZE", "1")) > 1
        and not torch.cuda.is_available()
        and not (hasattr(torch, "xpu") and torch.xpu.is_available())
    )


def attribute_names(arguments_class: type) -> dict[str, str]:
    """TurboOptions field -> the attribute that carries it on `arguments_class` (see `_with_turbo_fields`)."""
    return getattr(arguments_class, "_turbo_attributes", {f.name: f.name for f in fields(TurboOptions)})


def _with_turbo_fields(cls):
    """Give `cls` TurboOptions' fields (same types, defaults and help), then make it a dataclass.

    A field the arguments class already has keeps its owner's meaning, and turbotrain's option of that
    name is carried as `turbo_<name>`: TRL's `SFTConfig.padding_free` (TRL's own flattening collator)
    stays TRL's, and turbotrain's packing of padded batches is `turbo_padding_free`.
    """
    own = {f.name for f in fields(cls)} if hasattr(cls, "__dataclass_fields__") else set()
    cls._turbo_attributes = {}
    for option in fields(TurboOptions):
        name = f"turbo_{option.name}" if option.name in own else option.name
        cls._turbo_attributes[option.name] = name
        cls.__annotations__[name] = option.type
        default = option.default if option.default is not MISSING else None
        setattr(cls, name, field(default=default, metadata=dict(option.metadata)))
    return dataclass(cls)


class TurboArgumentsMixin:
    """What every turbotrain arguments class adds to its TrainingArguments class (fields come from TurboOptions)."""

    def __post_init__(self):
        if str(self.optim) == ORT_FUSED_ALIAS:
            self.optim = "adamw_torch_fused"
        TurboOptions.from_args(self).validate()
        if _cpu_only_multiprocess() and not self.use_cpu:
            # Without use_cpu, Accelerate treats a torchrun launch on a machine with no accelerator as
            # not distributed: no gradient all-reduce, and Trainer still scales the loss by the process count.
            logger.info(
                "turbotrain: %s CPU processes and no accelerator: use_cpu=True (gloo data parallel)",
                os.environ.get("WORLD_SIZE"),
            )
            self.use_cpu = True
        super().__post_init__()

    @property
    def resolved_backend(self) -> str:
        """The backend name checked against the registry ('auto' is a backend of its own, backends/auto.py)."""
        return resolve_backend_name(self.backend, self.device)


@_with_turbo_fields
class TurboTrainingArguments(TurboArgumentsMixin, TrainingArguments):
    """`TrainingArguments` with turbotrain's options (see `TurboOptions`)."""

    __annotations__ = {}


_ARGUMENT_CLASSES: dict[type, type] = {TrainingArguments: TurboTrainingArguments}


def _rebuild_arguments(arguments_class: type, state: dict):
    """An instance of `turbo_arguments(arguments_class)` from its pickled state, in any process."""
    made = turbo_arguments(arguments_class)
    arguments = made.__new__(made)
    arguments.__dict__.update(state)
    return arguments


def _reduce_arguments(self):
    """Pickle by the user's class, not by name: `turbo_arguments(SFTConfig)` lives in no module, and Trainer
    saves `training_args.bin` with `torch.save` at every checkpoint (a class pickled by name failed there)."""
    return _rebuild_arguments, (type(self)._turbo_base, dict(self.__dict__))


def turbo_arguments(arguments_class: type[TrainingArguments]) -> type[TrainingArguments]:
    """`arguments_class` (TRL's `SFTConfig`, `Seq2SeqTrainingArguments`, ...) with turbotrain's options added.

    from trl import SFTConfig
    TurboSFTConfig = turbotrain.turbo_arguments(SFTConfig)
    args = TurboSFTConfig(output_dir="out", backend="eager", label_sparsity=True, ...)
    """
    if isinstance(arguments_class, type) and issubclass(arguments_class, TurboArgumentsMixin):
        return arguments_class
    if not (isinstance(arguments_class, type) and issubclass(arguments_class, TrainingArguments)):
        raise TypeError(f"turbo_arguments() takes a TrainingArguments subclass, got {arguments_class!r}")
    if arguments_class not in _ARGUMENT_CLASSES:
        namespace = {
            "__annotations__": {},
            "__module__": __name__,
            "__qualname__": f"Turbo{arguments_class.__name__}",
            "__doc__": f"`{arguments_class.__name__}` with turbotrain's options (see `TurboOptions`).",
            "_turbo_base": arguments_class,
            "__reduce__": _reduce_arguments,
        }
        made = type(f"Turbo{arguments_class.__name__}", (TurboArgumentsMixin, arguments_class), namespace)
        _ARGUMENT_CLASSES[arguments_class] = _with_turbo_fields(made)
    return _ARGUMENT_CLASSES[arguments_class]


TurboSeq2SeqTrainingArguments = turbo_arguments(Seq2SeqTrainingArguments)  # was: Seq2SeqTrainingArguments
