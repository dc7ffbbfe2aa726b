"""Zero-edit mode's one change: Transformers' and TRL's Trainer and arguments names become turbotrain's.

`install(defaults)` sets, for the rest of the process,

    transformers.Trainer / TrainingArguments / Seq2SeqTrainer / Seq2SeqTrainingArguments
    trl.SFTTrainer / SFTConfig / DPOTrainer / DPOConfig / ...   (when TRL is installed: every row of TRL's
        table, integrations/trl/)

to `turbo(X)` and `turbo_arguments(X)` (the ready names' classes: `transformers.Trainer is TurboTrainer`),
in the packages scripts import them from: `transformers` (a `_LazyModule`: an attribute set on it wins
over its lazy lookup), `trl` and `trl.trainer`. Importing `transformers.processing_utils` executes
Transformers' `__init__` a second time (`direct_transformers_import`), which puts a new `transformers`
module object in `sys.modules`; it is imported first, and the object patched is the one `sys.modules`
holds then, the one every later `import transformers` gets. So `from transformers import Trainer`,
`transformers.Trainer(...)` and `class MyTrainer(Trainer)` in a script all get turbotrain. The turbo
classes subclass the stock ones, so `isinstance(trainer, Trainer)` and `isinstance(args, SFTConfig)`
inside Transformers and TRL still hold.

The modules that define the classes keep them (`from transformers.trainer import Trainer` gets the
stock class): pickle finds a class by its defining module and name, and refuses one whose name there
is another object (Trainer pickles `training_args.bin` at every checkpoint, and turbotrain's pickled
arguments name their stock class).

Order matters: every module that subclasses these classes when it is imported must be imported first,
or its class would be built on turbotrain's. turbotrain's own classes import Transformers' Trainer,
Seq2SeqTrainer and their arguments; `install` imports TRL's trainers and configs before it patches
(~0.5 s), so `SFTTrainer` stays `SFTTrainer(_BaseTrainer(Trainer))` and `turbo(SFTTrainer)` keeps TRL's
own `padding_free` field apart from turbotrain's (`turbo_padding_free`). A library the script imports
later that subclasses `Trainer` at import time (sentence-transformers' trainer, ...) is built on
turbotrain's classes, like a script's own subclass. A TRL trainer not listed here keeps TRL's class, and so does
a listed one whose module a TRL release moved or dropped (one warning naming it; the others are still replaced).

`defaults` (options from `turbotrain run` flags or `TURBOTRAIN_OPTIONS`) become the defaults of the
arguments classes: each is then a subclass made for this run with those field defaults, so a value the
script passes, or its HfArgumentParser command line sets, still wins; it pickles as its turbo class.
Nothing here runs on `import turbotrain`; `Patch.undo()` puts every name back (tests).
"""

from __future__ import annotations

import importlib
import logging
import sys
from dataclasses import MISSING, dataclass, field, fields

from turbotrain.utils.imports import is_trl_available

logger = logging.getLogger("turbotrain")

TRANSFORMERS_CLASSES = {  # name -> the module that defines it (and keeps it)
    "Trainer": "transformers.trainer",
    "TrainingArguments": "transformers.training_args",
    "Seq2SeqTrainer": "transformers.trainer_seq2seq",
    "Seq2SeqTrainingArguments": "transformers.training_args_seq2seq",
}


@dataclass
class Patch:
    """What `install` replaced: (module, name, the value before) per name set, and the classes by name."""

    replaced: list[tuple[object, str, object]] = field(default_factory=list)
    classes: dict[str, type] = field(default_factory=dict)

    def undo(self) -> None:
        for module, name, before in reversed(self.replaced):
            if before is MISSING:
                delattr(module, name)
            else:
                setattr(module, name, before)
        self.replaced.clear()


def _rebuild(arguments_class: type, state: dict):
    arguments = arguments_class.__new__(arguments_class)
    arguments.__dict__.update(state)
    return arguments


def _reduce_as(arguments_class: type):
    """`__reduce__` of a run's arguments: pickled as an instance of `arguments_class`, the turbo class they
    were made from (its own `__reduce__` where it has one: `turbo_arguments` classes), so they load in
    any process; this run's class exists in no module."""

    def reduce(self):
        if arguments_class.__reduce__ is not object.__reduce__:
            plain = _rebuild(arguments_class, self.__dict__)
            return arguments_class.__reduce__(plain)
        return _rebuild, (arguments_class, dict(self.__dict__))

    return reduce


def with_defaults(arguments_class: type, defaults: dict) -> type:
    """`arguments_class` (a turbo arguments class) with turbotrain's option defaults set to `defaults`."""
    if not defaults:
        return arguments_class
    from turbotrain.args import attribute_names

    names = attribute_names(arguments_class)
    own = {f.name: f for f in fields(arguments_class)}
    namespace = {
        "__annotations__": {},
        "__module__": arguments_class.__module__,
        "__qualname__": arguments_class.__qualname__,
        "__doc__": arguments_class.__doc__,
        "__reduce__": _reduce_as(arguments_class),
    }
    for option, value in defaults.items():
        name = names[option]
        namespace["__annotations__"][name] = own[name].type
        default = {"default_factory": lambda v=value: dict(v)} if isinstance(value, dict) else {"default": value}
        namespace[name] = field(**default, metadata=dict(own[name].metadata))
    return dataclass(type(arguments_class.__name__, (arguments_class,), namespace))


def _turbo_classes(names: dict[str, str], defaults: dict) -> dict[str, type]:
    from transformers import Trainer

    from turbotrain.args import turbo_arguments
    from turbotrain.integrations import turbo

    made = {}
    for name, module_name in names.items():
        stock = getattr(importlib.import_module(module_name), name)
        if issubclass(stock, Trainer):
            made[name] = turbo(stock)
        else:
            made[name] = with_defaults(turbo_arguments(stock), defaults)
    return made


def _trl_classes(defaults: dict) -> dict[str, type]:
    """The turbo classes of every row of TRL's table (integrations/trl/), a trainer and its config together: a pair
    whose module this TRL release lacks stays stock (one warning), the others are made."""
    if not is_trl_available():
        return {}
    from turbotrain.integrations.trl import TRAINERS

    made = {}
    for row in TRAINERS:
        try:
            made.update(_turbo_classes(row.modules, defaults))
        except (ImportError, AttributeError) as error:  # a TRL release that moved or dropped them: they stay stock
            names = " and ".join(row.modules)
            logger.warning("turbotrain run: TRL's %s stay stock: %s: %s", names, type(error).__name__, error)
    return made


def _set(patch: Patch, module, name: str, value) -> None:
    patch.replaced.append((module, name, module.__dict__.get(name, MISSING)))
    setattr(module, name, value)


def install(defaults: dict | None = None) -> Patch:
    """Replace the names (see the module docstring); `defaults`: turbotrain options for the arguments classes."""
    importlib.import_module("transformers.processing_utils")  # re-makes the `transformers` module, once
    defaults = defaults or {}
    patch = Patch(classes=_turbo_classes(TRANSFORMERS_CLASSES, defaults))
    trl_classes = _trl_classes(defaults)  # imported before anything is patched
    transformers = sys.modules["transformers"]  # the module object every later `import transformers` gets
    for name, made in patch.classes.items():
        _set(patch, transformers, name, made)
    if trl_classes:
        import trl
        import trl.trainer

        for name, made in trl_classes.items():
            for package in (trl, trl.trainer):
                _set(patch, package, name, made)
        patch.classes.update(trl_classes)
    return patch
