"""`TurboTrainingArguments`: `transformers.TrainingArguments` plus turbotrain's options (`TurboOptions`).

Everything TrainingArguments accepts keeps its meaning. turbotrain's options are written once, each part's in its
own module as a frozen dataclass with a `check` (the backend's, `BackendChoice`, here); `TurboOptions` derives from
all of them (`PARTS`), and every arguments class gets its fields, so they work as keyword arguments, in `to_dict()`
and on the command line (a dict option, `backend_options`, takes JSON text there, parsed once at construction).
They flow one way (docs/architecture.md, "Options flow one way"): checked once at construction, read once by the
trainer, never written back. `optim="adamw_ort_fused"` (ORTTrainer's name) is accepted as the fused AdamW.
"""

from __future__ import annotations

import json
import logging
import os
import typing
from dataclasses import MISSING, dataclass, field, fields, replace

import torch
from transformers import Seq2SeqTrainingArguments, TrainingArguments

from turbotrain.backends import AUTO, backend_class
from turbotrain.passes import registry
from turbotrain.passes.chunked_ce import ChunkedCrossEntropyOptions
from turbotrain.passes.embedding_grad import EmbeddingGradOptions
from turbotrain.passes.fused_activation import FusedActivationOptions
from turbotrain.passes.fused_lora import FusedLoraOptions
from turbotrain.passes.fused_optimizer import ORT_FUSED_ALIAS, FusedOptimizerOptions
from turbotrain.passes.label_sparsity import LabelSparsityOptions
from turbotrain.passes.lean_gated_mlp import LeanGatedMlpOptions
from turbotrain.passes.padding_free import PaddingFreeOptions
from turbotrain.training.bf16_emulation import Bf16EmulationOptions
from turbotrain.training.token_budget import TokenBudgetOptions

logger = logging.getLogger("turbotrain")
EXAMPLE_JSON = '{"scope": "blocks"}'


@dataclass(frozen=True)
class BackendChoice:
    """What executes the step, and its options (checked against the backend's typed options class)."""

    backend: str = field(
        default=AUTO,
        metadata={
            "help": "What executes the step: 'auto' (eager or inductor, whichever measures faster on the run's own "
            "steps, cached per machine; backends/auto.py), 'eager', 'inductor', 'onnxruntime', 'xla' "
            "(turbotrain/backends/)."
        },
    )
    backend_options: dict | None = field(
        default=None,
        metadata={
            "help": "Options of the chosen backend: auto (min_steps, measure_steps, min_eager_s, cache, scope), inductor (scope: "
            "'model' or 'blocks'), onnxruntime (providers, cache_dir, check_first_run, session_options), xla "
            "(num_devices, length_buckets, label_row_buckets, matmul_precision, shard, host_timeout_s); unknown keys "
            "are an error."
        },
    )

    @classmethod
    def check(cls, values) -> None:
        backend = backend_class(values.backend)  # an unknown name raises, listing the valid ones
        if values.backend_options is not None and not isinstance(values.backend_options, dict):
            raise ValueError(f"backend_options must be a dict, got {values.backend_options!r}")
        backend.options_class.from_dict(values.backend_options, values.backend)


@dataclass(frozen=True)
class TurboOptions(
    FusedOptimizerOptions,
    LeanGatedMlpOptions,
    FusedLoraOptions,
    FusedActivationOptions,
    EmbeddingGradOptions,
    PaddingFreeOptions,
    ChunkedCrossEntropyOptions,
    LabelSparsityOptions,
    Bf16EmulationOptions,
    TokenBudgetOptions,
    BackendChoice,
):
    """turbotrain's options of one run, every part's options class composed; plain TrainingArguments get the
    defaults. A dataclass takes its bases' fields last base first: the backend's, the token budget's, the
    emulation's, then each pass's in pass order."""

    @classmethod
    def from_args(cls, args: TrainingArguments) -> TurboOptions:
        if not isinstance(args, TurboArgumentsMixin):
            return cls()
        names = attribute_names(type(args))
        return cls(**{f.name: getattr(args, names[f.name]) for f in fields(cls)})

    def validate(self) -> None:
        for part in PARTS:
            part.check(self)

    def switched_off(self, names) -> TurboOptions:
        """These options with the passes `names` turned off."""
        return replace(self, **{name: registry.off_value(name) for name in names})

    def without(self, turned_off: dict[str, str], backend: str) -> TurboOptions:
        """These options with the ones a backend cannot use switched off (each said once in the log)."""
        off = {name: why for name, why in turned_off.items() if getattr(self, name) != registry.off_value(name)}
        for name, reason in off.items():
            logger.info("turbotrain %s: %s is not used with this backend (%s)", backend, name, reason)
        return self.switched_off(off)


PARTS = TurboOptions.__bases__[::-1]  # each part's options class, written in its own module, in field order


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


def _dict_options() -> tuple[str, ...]:
    """The TurboOptions fields that hold a dict (`backend_options`)."""
    hints = typing.get_type_hints(TurboOptions)
    return tuple(f.name for f in fields(TurboOptions) if dict in typing.get_args(hints[f.name]))


def json_object(name: str, text: str) -> dict | None:
    """`text` as the dict option `name` takes: a JSON object, or `null` for none; anything else is refused."""
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{name} takes a JSON object, such as '{EXAMPLE_JSON}', got {text!r}")
    return value


def _parse_json_options(args) -> None:
    """Dict options given as JSON text (what HfArgumentParser passes from a command line) become dicts, once,
    at construction."""
    for name in _dict_options():
        attribute = attribute_names(type(args))[name]
        if isinstance(getattr(args, attribute), str):
            setattr(args, attribute, json_object(name, getattr(args, attribute)))


def _with_turbo_fields(cls):
    """Give `cls` TurboOptions' fields (same types, defaults and help; a dict option is `dict | str | None`, JSON
    text too, as TrainingArguments' own dict fields: HfArgumentParser cannot fill a `dict` field), then make it a
    dataclass.

    A field the arguments class already has keeps its owner's meaning, and turbotrain's option of that
    name is carried as `turbo_<name>`: TRL's `SFTConfig.padding_free` (TRL's own flattening collator)
    stays TRL's, and turbotrain's packing of padded batches is `turbo_padding_free`.
    """
    own = {f.name for f in fields(cls)} if hasattr(cls, "__dataclass_fields__") else set()
    cls._turbo_attributes = {}
    for option in fields(TurboOptions):
        name = f"turbo_{option.name}" if option.name in own else option.name
        cls._turbo_attributes[option.name] = name
        cls.__annotations__[name] = dict | str | None if option.name in _dict_options() else option.type
        default = option.default if option.default is not MISSING else None
        setattr(cls, name, field(default=default, metadata={"help": option.metadata["help"]}))
    return dataclass(cls)


class TurboArgumentsMixin:
    """What every turbotrain arguments class adds to its TrainingArguments class (fields come from TurboOptions)."""

    def __post_init__(self):
        if str(self.optim) == ORT_FUSED_ALIAS:
            self.optim = "adamw_torch_fused"
        _parse_json_options(self)
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


def rebuilt_as(args: TrainingArguments, arguments_class: type[TrainingArguments]) -> TrainingArguments:
    """`args` (turbo arguments) as a `turbo_arguments(arguments_class)`: the TrainingArguments values as TRL carries
    plain arguments into its config (`arguments_class(**args.to_dict())`, the hub token restored), each turbotrain
    option under its name there (`padding_free` -> `turbo_padding_free` where the class has its own)."""
    made = turbo_arguments(arguments_class)
    carried, target = attribute_names(type(args)), attribute_names(made)
    values = {k: v for k, v in args.to_dict().items() if k not in set(carried.values())}
    values["hub_token"] = args.hub_token  # to_dict hides it
    values.update({target[name]: getattr(args, attribute) for name, attribute in carried.items()})
    return made(**values)


TurboSeq2SeqTrainingArguments = turbo_arguments(Seq2SeqTrainingArguments)  # was: Seq2SeqTrainingArguments
