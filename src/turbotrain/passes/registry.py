"""The one list of turbotrain's passes. Each pass module ends by registering a `PassSpec`: its name (which
is also its option's name), its options, how to install it from the effective options, why a trainer or a
model refuses it, and how the run's summary names it. Everything that names passes loops over this list:

* `optimize()` (optimize.py) installs the model passes in `order`, each from a `Setup` (`setup_for`) holding
  its own options as a frozen dataclass (`PassSpec.options_class`) and no other pass's. Where two passes
  cooperate, the one built as a part of the other says so (`part_of`: chunked cross-entropy is label
  sparsity's head), and the registry hands its options to that pass's install (`Setup.parts`);
* `TurboOptions` (args.py) has one field per `Option` the passes declare, so `TurboTrainingArguments`,
  `turbo_arguments(...)` and the command line of an `HfArgumentParser` script get them too;
* the trainer asks every pass still on whether this trainer refuses it (`refused_by_trainer`, e.g. label
  smoothing reads the full logits), once, and switches it off in the effective options;
* the run's summary (summary.py) names each installed pass by its `label`, and each requested one that is
  not active with why;
* the benchmark's `turbo_off` ablations and the CLI's `--turbo-off` take every pass name;
* the training collator (`OptimizeReport.collator`, which TurboTrainer's training dataloader uses) is the
  user's collator wrapped by each installed pass's `collator` step, the pass installed last innermost: each
  step adds the batch keys its pass declares (`batch_keys`, all named in batch_keys.py), and the passes' model
  pre-hooks, which run in install order, take them off again in the reverse order (the last key added is the
  first taken off), so the model never sees one.

Adding a pass: one file in `passes/` that ends with `register_pass(PassSpec(...))` (or, for a pass with helpers of its
own, a folder: the pass in its `__init__.py`, the helpers beside it, as `passes/padding_free/`), and its module named
in the registration import of `passes/__init__.py`; a pass with a batch side gives its `collator` step and
`batch_keys` there too. A pass outside the package registers the same way, before `turbotrain.args` is imported:
`TurboOptions` is built from this list then, and a registration after that raises (its option would be missing).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, make_dataclass
from typing import Any

_PASSES: dict[str, PassSpec] = {}
_OPTIONS_BUILT = False  # set once TurboOptions has read the options (args.py)


@dataclass(frozen=True)
class Option:
    """One option as `TurboOptions` carries it: a switch (bool default) or one of `choices` (str default).
    `off` is the value that turns the pass off (what `--turbo-off` and a backend's `turns_off` set)."""

    name: str
    default: bool | str
    help: str
    choices: tuple[str, ...] = ()
    off: bool | str = False
    numbers: bool = False  # a positive whole number (as text) is valid too, besides `choices`

    @property
    def type(self) -> type:
        return type(self.default)

    def check(self, value: Any) -> None:
        number = self.numbers and str(value).isdigit() and int(value) > 0
        if self.choices and value not in self.choices and not number:
            also = " or a positive number" if self.numbers else ""
            raise ValueError(f"{self.name} must be one of {', '.join(self.choices)}{also}, got {value!r}")
        if not self.choices and not isinstance(value, bool):
            raise ValueError(f"{self.name} must be True or False, got {value!r}")


@dataclass(frozen=True)
class StepPlace:
    """Where the training step runs, for the passes' collator steps: the run's `device`, and whether Trainer's
    own loop hands the model the collated batch (`in_trainer_loop`; False under a backend that brings its own
    loop, xla, which shapes its batches itself). The default: a step on the CPU in Trainer's loop."""

    device: Any = "cpu"
    in_trainer_loop: bool = True


@dataclass(frozen=True)
class Setup:
    """What a pass's `install` reads: its own options (an instance of its `PassSpec.options_class`), whether to
    run the self-checks, whether TRL's `fused_lm_head` calls may be answered (passes/fused_head_calls.py), and
    the options of the passes it builds as its parts (`PassSpec.part_of`) that are on, by pass name."""

    options: Any
    check: bool = True
    fused_head_calls: bool | str = False
    parts: Mapping[str, Any] = field(default_factory=dict)


def _refused(model) -> bool:
    return True


@dataclass(frozen=True)
class PassSpec:
    """One pass. `install(model, setup)` returns the installed pass (with `remove()`) or None; None is a
    refusal of the model (said in one warning by the pass, listed in the summary) where `refused_for(model)`,
    else there was nothing to do (no tanh GELU to fuse). `install=None` (and no `part_of`): not a model pass (the fused
    optimizer, which the trainer applies through the optimizer it creates). `refused_by_trainer(trainer)`:
    why this trainer's loss cannot use the pass (logged by the pass), or None. `label(installed)`: its
    name in the summary's list of active passes (default: `name`). `listed_when_inactive=False`: the
    summary does not list it as not active (chunked cross-entropy: its default "auto" asks only for large
    calls). `more_options`: options that tune the pass (`padding_free_with_dropout`). `not_applicable(model)`:
    what the model lacks for the pass (no token ids, no embedding table), said at INFO instead of installing
    (the summary lists it as not active with that reason), or None. `collator(installed, inner, place)`: the
    pass's step of the training collator, `inner` wrapped so its batches carry what the pass's hooks read, or
    `inner` itself where `place` (a `StepPlace`) needs nothing; `batch_keys`: the private keys that step adds
    (named in batch_keys.py), which the pass's model pre-hook takes off (see the module docstring).
    `part_of`: the pass whose install builds this one as a part of it (chunked cross-entropy, label sparsity's
    head); such a pass has no `install`: the registry hands its options to that install (`Setup.parts`, when
    it is on), and `optimize()` reports the part that installed pass lists in its `parts` (pass name ->
    installed part) under this pass's name."""

    name: str
    help: str
    order: int  # install order, and the order of reports and options
    install: Callable[[Any, Setup], Any] | None
    default: bool | str = True
    choices: tuple[str, ...] = ()
    off: bool | str = False
    more_options: tuple[Option, ...] = ()
    refused_by_trainer: Callable[[Any], str | None] | None = None
    refused_for: Callable[[Any], bool] = _refused
    not_applicable: Callable[[Any], str | None] | None = None  # what the model lacks for it (no token ids)
    label: Callable[[Any], str] | None = None
    listed_when_inactive: bool = True
    collator: Callable[[Any, Any, StepPlace], Any] | None = None
    batch_keys: tuple[str, ...] = ()
    part_of: str | None = None

    @property
    def options(self) -> tuple[Option, ...]:
        return (Option(self.name, self.default, self.help, self.choices, self.off), *self.more_options)

    @property
    def is_model_pass(self) -> bool:
        """Installed on the model by `optimize()`, itself or as a part of another pass."""
        return self.install is not None or self.part_of is not None

    @functools.cached_property
    def options_class(self) -> type:
        """This pass's own options: a frozen dataclass with one field per option it declares, named as the
        option (`padding_free_row_tokens`, as in `TurboOptions` and `optimize()`), typed by its default."""
        name = "".join(word.title() for word in self.name.split("_")) + "Options"
        fields = [(option.name, option.type, field(default=option.default)) for option in self.options]
        return make_dataclass(name, fields, frozen=True, namespace={"__module__": __name__})

    def options_from(self, values: Mapping[str, Any]) -> Any:
        """This pass's options, taken from every model-pass option's effective value (`option_values`)."""
        return self.options_class(**{option.name: values[option.name] for option in self.options})

    def label_of(self, installed: Any) -> str:
        return self.label(installed) if self.label is not None else self.name


def register_pass(spec: PassSpec) -> PassSpec:
    """Add `spec` to the registry (before `turbotrain.args` is imported: see the module docstring)."""
    if _OPTIONS_BUILT:
        raise RuntimeError(
            f"pass '{spec.name}' registered after TurboOptions was built from the registry: import the module "
            "that registers it before turbotrain.args (or turbotrain.TurboTrainer)"
        )
    taken = {option.name for known in _PASSES.values() for option in known.options}
    clash = sorted(taken.intersection(option.name for option in spec.options))
    if spec.name in _PASSES or clash:
        raise ValueError(f"pass '{spec.name}': option names already registered: {clash or [spec.name]}")
    keys_taken = sorted({key for known in _PASSES.values() for key in known.batch_keys}.intersection(spec.batch_keys))
    if keys_taken:
        raise ValueError(f"pass '{spec.name}': batch keys another pass adds: {keys_taken}")
    _PASSES[spec.name] = spec
    return spec


def passes() -> list[PassSpec]:
    """Every registered pass, in install order."""
    return sorted(_PASSES.values(), key=lambda spec: spec.order)


def model_passes() -> list[PassSpec]:
    """The passes `optimize()` installs on a model (itself, or as a part of another)."""
    return [spec for spec in passes() if spec.is_model_pass]


def setup_for(spec: PassSpec, values: Mapping[str, Any], check: bool, fused_head_calls: bool | str) -> Setup:
    """What `spec`'s install is handed: its own options and, of the passes it builds as parts, the options of
    each one that is on (`values`: every model-pass option's effective value, `option_values`)."""
    parts = {
        part.name: part.options_from(values)
        for part in passes()
        if part.part_of == spec.name and values[part.name] != part.off
    }
    return Setup(spec.options_from(values), check, fused_head_calls, parts)


def pass_names() -> list[str]:
    return [spec.name for spec in passes()]


def get_pass(name: str) -> PassSpec:
    return _PASSES[name]


def options(model_only: bool = False) -> list[Option]:
    """Every pass option, in pass order (`model_only`: of the model passes, what `optimize()` takes)."""
    return [option for spec in (model_passes() if model_only else passes()) for option in spec.options]


def options_for_turbo_options() -> list[Option]:
    """`options()`, for args.py to build `TurboOptions` from; later registrations are refused."""
    global _OPTIONS_BUILT
    _OPTIONS_BUILT = True
    return options()


def off_value(name: str) -> bool | str:
    """The value that turns option `name` off."""
    return next(option.off for option in options() if option.name == name)


def option_values(given: Mapping[str, Any]) -> dict[str, Any]:
    """Every model-pass option's value: `given` (checked) over the defaults; an unknown name is a TypeError."""
    known = {option.name: option for option in options(model_only=True)}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError(f"unknown pass options {unknown}; the passes take: {', '.join(known)}")
    values = {name: given.get(name, option.default) for name, option in known.items()}
    for name, value in values.items():
        known[name].check(value)
    return values


def trainer_refusals(trainer, options) -> dict[str, str]:
    """Pass name -> why `trainer` refuses it, for every pass `options` (effective TurboOptions) still has on."""
    refusals = {}
    for spec in passes():
        if spec.refused_by_trainer is None or getattr(options, spec.name) == spec.off:
            continue
        reason = spec.refused_by_trainer(trainer)
        if reason is not None:
            refusals[spec.name] = reason
    return refusals
