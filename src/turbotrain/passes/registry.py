"""The one list of turbotrain's passes. Each pass module ends with its options class decorated by
`@register_pass(...)`, which registers a `PassSpec`: its name (its options class's first field, the pass's
switch), its options class, how to install it from the effective options, why a trainer or a
model refuses it, and how the run's summary names it. Everything that names passes loops over this list:
`optimize()` (each install handed a `Setup` with its own options and those of the passes built as its parts,
`part_of`), `TurboOptions` (args.py: each pass's options class among its bases), the trainer's refusals
(`trainer_refusals`), the run's summary (`label`), the bench's `turbo_off` and the CLI's `--turbo-off`, and the
training collator (`OptimizeReport.collator`): the user's collator wrapped by each installed pass's `collator`
step, the pass installed last innermost; each step adds the batch keys its pass declares (`batch_keys`, named in
batch_keys.py), and the passes' pre-hooks, in install order, take them off in the reverse order, so the model
never sees one. Adding a pass: docs/architecture.md, "What a change touches"; a pass outside the package
registers the same way, `optimize(model, its_option=...)` takes its options, TurboTrainer gives it its defaults.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from types import MappingProxyType, SimpleNamespace
from typing import Any

_PASSES: dict[str, PassSpec] = {}
_VARIANTS: dict[str, tuple] = {}  # pass name -> (applies, install): `register_variant`


def option(
    default: bool | str, help: str = "", *, choices: tuple[str, ...] = (), off: bool | str = False, numbers=False
):
    """One option's field in a pass's options class: a switch (bool default) or one of `choices` (str default;
    `numbers`: a positive whole number, as text, is valid too). `off` is the value that turns the pass off (what
    `--turbo-off` and a backend's `turns_off` set); `help` is its help on a command line (HfArgumentParser); the
    switch's (the first field's) is its class's docstring (`register_pass`)."""
    return field(default=default, metadata={"help": help, "choices": choices, "off": off, "numbers": numbers})


def check_option(declared: Field, value: Any) -> None:
    """`value` for the field `declared` with `option(...)`: a value it does not take raises."""
    choices, numbers = declared.metadata["choices"], declared.metadata["numbers"]
    if choices and value not in choices and not (numbers and str(value).isdigit() and int(value) > 0):
        also = " or a positive number" if numbers else ""
        raise ValueError(f"{declared.name} must be one of {', '.join(choices)}{also}, got {value!r}")
    if not choices and not isinstance(value, bool):
        raise ValueError(f"{declared.name} must be True or False, got {value!r}")


@dataclass(frozen=True)
class PassOptions:
    """The base of each pass's options class: a frozen dataclass in the pass's module, one `option(...)` field per
    option, the first named as the pass (its switch, whose help is the class's docstring), registered by decorating
    it with `register_pass(...)`. `TurboOptions` (args.py) derives from every one of them."""

    @classmethod
    def check(cls, values: Any) -> None:
        """This class's options as `values` holds them (an instance of it, or of TurboOptions): a bad one raises."""
        for each in fields(cls):
            check_option(each, getattr(values, each.name))


@dataclass(frozen=True)
class StepPlace:
    """Where the training step runs, for the passes' collator steps: the run's `device`, and whether Trainer's
    own loop hands the model the collated batch (`in_trainer_loop`; False under a backend that brings its own
    loop, xla, which shapes its batches itself). The default: a step on the CPU in Trainer's loop."""

    device: Any = "cpu"
    in_trainer_loop: bool = True


@dataclass
class CollatorStep:
    """Base of a pass's step of the training collator (`PassSpec.collator`): collate with `inner` (the user's
    collator or the next pass's step) as before, then `step(batch)` (subclasses: dataclasses whose fields follow
    `inner`) adds the pass's batch keys or rewrites the batch."""

    inner: Callable

    def __call__(self, features):
        return self.step(self.inner(features))

    def step(self, batch):
        raise NotImplementedError


def batch_tensor(batch: Any, key: str) -> Any:
    """`batch[key]` where the batch has keys and that one (a dict, BatchEncoding), else None."""
    return batch.get(key) if hasattr(batch, "get") else None


@dataclass(frozen=True)
class TrainerFacts:
    """What the trainer's own loss asks of the passes, built once by the trainer (integrations/trl/ for TRL's) and
    handed to every pass's refusal and install; the defaults are a plain `optimize()` call's. `sums_tokens`: a sum
    over tokens (packing rows changes nothing). `fused_call_weighting`: how the loss weights TRL's `fused_lm_head`
    calls' log-probs, for the chunked head to answer them at `fused_call_temperature` (None: not answered;
    fused_head_calls.py). `packs_scored_calls`: those calls' rows are one block of real tokens each, packable
    inside each call (padding_free/scored_calls.py). `reference_model`: its own, whose calls are answered too.
    `refusals`: pass name -> why this trainer refuses it."""

    sums_tokens: bool = True
    fused_call_weighting: str | None = None
    fused_call_temperature: float = 1.0
    packs_scored_calls: bool = False
    reference_model: Any = None
    refusals: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Setup:
    """What a pass's `install` reads: its own options (an instance of its `PassSpec.options_class`), whether to
    run the self-checks, the trainer's facts, the options of the passes it builds as its parts (`PassSpec.part_of`)
    that are on, by pass name, and the passes installed before it on this model, by name."""

    options: Any
    check: bool = True
    facts: TrainerFacts = TrainerFacts()
    parts: Mapping[str, Any] = field(default_factory=dict)
    installed: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PassSpec:
    """One pass. `install(model, setup)` returns the installed pass (with `remove()`) or None: a refusal of the
    model (warned by the pass, listed in the summary) where `refused_for(model)`, else nothing to do (no tanh GELU);
    `install=None` without `part_of`: not a model pass (the fused optimizer, applied through the trainer's
    optimizer). `part_of`: the pass whose install builds this one (chunked cross-entropy, label sparsity's head):
    its options are handed to that install (`Setup.parts`, when on) and `optimize()` reports the part under this
    pass's name. `refused_by_trainer(trainer, facts)`: why this trainer cannot use it, or None.
    `not_applicable(model)`: what the model lacks for it (no token ids), said at INFO instead of installing.
    `label(installed)`: its name in the summary (default `name`); `listed_when_inactive=False`: not listed as not
    active (chunked cross-entropy's "auto" asks only for large calls). `collator(installed, inner, place)`: its
    step of the training collator (`inner` itself where `place`, a `StepPlace`, needs nothing), adding
    `batch_keys`, which its pre-hook takes off (see the module docstring)."""

    name: str
    options_class: type[PassOptions]
    order: int  # install order, and the order of reports
    install: Callable[[Any, Setup], Any] | None
    refused_by_trainer: Callable[[Any, TrainerFacts], str | None] | None = None
    refused_for: Callable[[Any], bool] = lambda model: True
    not_applicable: Callable[[Any], str | None] | None = None
    label: Callable[[Any], str] | None = None
    listed_when_inactive: bool = True
    collator: Callable[[Any, Any, StepPlace], Any] | None = None
    batch_keys: tuple[str, ...] = ()
    part_of: str | None = None

    @property
    def options(self) -> tuple[Field, ...]:
        return fields(self.options_class)

    @property
    def off(self) -> bool | str:
        """The value of its switch (the option named as the pass) that turns it off."""
        return self.options[0].metadata["off"]

    @property
    def is_model_pass(self) -> bool:
        """Installed on the model by `optimize()`, itself or as a part of another pass."""
        return self.install is not None or self.part_of is not None

    def is_on(self, values: Any) -> bool:
        """Its switch in `values` is not off (its default where they lack it: a pass registered outside the package)."""
        return getattr(values, self.name, self.options[0].default) != self.off

    def options_from(self, values: Any) -> PassOptions:
        """This pass's options, taken from `values` (TurboOptions, or `option_values`' namespace) by field name."""
        return self.options_class(**{each.name: getattr(values, each.name, each.default) for each in self.options})

    def label_of(self, installed: Any) -> str:
        return self.label(installed) if self.label is not None else self.name


def register_pass(**hooks) -> Callable[[type[PassOptions]], type[PassOptions]]:
    """Decorates a pass's options class (a frozen dataclass): registers the `PassSpec` with `hooks` (its fields but
    `name` and `options_class`), named after the class's first field, the pass's switch, whose help on a command
    line is the class's docstring. Returns the class itself."""

    def register(options_class: type[PassOptions]) -> type[PassOptions]:
        switch = fields(options_class)[0]
        if not switch.metadata.get("help"):
            switch.metadata = MappingProxyType({**switch.metadata, "help": _docstring_help(options_class)})
        add_pass(PassSpec(name=switch.name, options_class=options_class, **hooks))
        return options_class

    return register


def _docstring_help(options_class: type) -> str:
    written = options_class.__dict__.get("__doc__") or ""
    if not written or written.startswith(f"{options_class.__name__}("):  # dataclass's generated one
        raise ValueError(f"{options_class.__name__} needs a docstring: its switch's help on a command line")
    return " ".join(inspect.cleandoc(written).split())


def add_pass(spec: PassSpec) -> PassSpec:
    """Add `spec` to the registry (`register_pass` builds it from an options class); its options class must name
    its switch after it, and neither its options nor its batch keys may be another pass's."""
    if spec.options[0].name != spec.name:
        raise ValueError(f"pass '{spec.name}': the first field of {spec.options_class.__name__} is its switch")
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


def setup_for(spec: PassSpec, values: Any, check: bool, facts: TrainerFacts, installed=None) -> Setup:
    """What `spec`'s install is handed: its own options and, of the passes it builds as parts, the options of
    each one that is on (`values`: the effective options by attribute, TurboOptions or `option_values`)."""
    parts = {
        part.name: part.options_from(values) for part in passes() if part.part_of == spec.name and part.is_on(values)
    }
    return Setup(spec.options_from(values), check, facts, parts, dict(installed or {}))


def register_variant(name: str, applies: Callable[[TrainerFacts], bool], install: Callable[[Any, Setup], Any]) -> None:
    """Pass `name` installs with `install` instead of its own for the trainers whose facts `applies` to: padding-free
    inside TRL's scored calls, where the loss reads rows (padding_free/scored_calls.py)."""
    _VARIANTS[name] = (applies, install)


def install_of(spec: PassSpec, facts: TrainerFacts) -> Callable[[Any, Setup], Any]:
    applies, install = _VARIANTS.get(spec.name, (None, None))
    return install if applies is not None and applies(facts) else spec.install


def pass_names() -> list[str]:
    return [spec.name for spec in passes()]


def get_pass(name: str) -> PassSpec:
    return _PASSES[name]


def off_value(name: str) -> bool | str:
    """The value that turns pass `name` off."""
    return get_pass(name).off


def option_values(given: Mapping[str, Any], options: Any = None) -> SimpleNamespace:
    """Every model-pass option's value by attribute: `given` over `options` (the effective TurboOptions, where
    the caller has them) over the defaults, each checked; an unknown name in `given` is a TypeError."""
    known = {option.name: option for spec in model_passes() for option in spec.options}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError(f"unknown pass options {unknown}; the passes take: {', '.join(known)}")
    values = {name: given.get(name, getattr(options, name, option.default)) for name, option in known.items()}
    for name, value in values.items():
        check_option(known[name], value)
    return SimpleNamespace(**values)


def trainer_refusals(trainer, options, facts: TrainerFacts) -> dict[str, str]:
    """Pass name -> why `trainer` refuses it, for every pass `options` (effective TurboOptions) still has on: its
    facts' refusals (a TRL trainer's, from its row), then each pass's own `refused_by_trainer`."""
    refusals = {}
    for spec in passes():
        if not spec.is_on(options):
            continue
        reason = facts.refusals.get(spec.name)
        if reason is None and spec.refused_by_trainer is not None:
            reason = spec.refused_by_trainer(trainer, facts)
        if reason is not None:
            refusals[spec.name] = reason
    return refusals
