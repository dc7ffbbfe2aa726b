"""The interface every backend implements. A backend decides what executes the training step.

A backend is a small class registered under a name (see `registry.py`) with one typed options class
(`options_class`, a frozen `BackendOptions` dataclass: `backend_options={...}` is parsed into it once,
unknown keys are an error naming the valid ones). Options flow one way: the backend never changes the
user's arguments; it declares the turbotrain options it cannot use (`turns_off`: name -> reason) and
the trainer computes the effective options once (`TurboOptions.without`).

`TurboTrainer` calls, in order: `check_available(args)` (raise `BackendUnavailable` naming what to
install), then `wrap_model(model)` on the model the Trainer will train (`inductor` compiles it in
place there; `unwrap_model` undoes that), then adds the backend's `callbacks()` to the Trainer (`auto`
times the steps with one), and logs its `summary()` in the run's one-line summary. A backend whose step cannot run inside Trainer's loop (xla: no `loss.backward()`)
returns its own loop from `training_loop(trainer)` and says so in `owns_loop`; the trainer then calls it in
place of Trainer's inner loop, after Trainer's `train()` has done the setup and resume, and gives the passes'
collator steps a place outside Trainer's loop (label sparsity's host rows stay out: the loop shapes its
batches itself). The trainer never branches on a backend's name.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from torch import nn
from transformers import TrainingArguments

EAGER_ONLY_CHUNKED_CE = "the chunked head is an eager autograd.Function looping over a data-dependent row count"


class BackendUnavailable(RuntimeError):
    """The backend cannot run here; the message says what to install or change."""


def refuse_trainer_compile(backend: str, args: TrainingArguments) -> None:
    """A backend that compiles or exports the step itself (inductor, onnxruntime, xla) does not also run under
    Trainer's own `torch_compile=True` (accelerate's torch.compile around the model): two compilers on one model
    (under it, onnxruntime's graphs failed and ran eager, said once; inductor compiled twice)."""
    if getattr(args, "torch_compile", False):
        raise BackendUnavailable(
            f"backend='{backend}' compiles the training step itself, and torch_compile=True asks Trainer to compile "
            f"the model again around it: set torch_compile=False to train with backend '{backend}', or "
            "backend='eager' to train under Trainer's torch.compile alone"
        )


@dataclass(frozen=True)
class BackendOptions:
    """A backend's options; subclasses add fields (with defaults) and checks in `validate`."""

    @classmethod
    def from_dict(cls, options: dict[str, Any] | None, backend: str = "") -> BackendOptions:
        options = dict(options or {})
        names = sorted(f.name for f in fields(cls))
        unknown = sorted(set(options) - set(names))
        if unknown:
            valid = ", ".join(names) if names else "none (it takes no options)"
            raise ValueError(f"unknown backend_options {unknown} for backend '{backend or '?'}'; valid: {valid}")
        parsed = cls(**cls.normalize(options))
        parsed.validate()
        return parsed

    @classmethod
    def normalize(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Turn user-given values into the field types (lists into tuples...); default: as given."""
        return options

    def validate(self) -> None:
        """Raise ValueError for a value out of range (default: nothing to check)."""


class Backend:
    name: ClassVar[str]
    options_class: ClassVar[type[BackendOptions]] = BackendOptions
    turns_off: ClassVar[dict[str, str]] = {}  # turbotrain option -> why this backend cannot use it
    owns_loop: ClassVar[bool] = False  # True: `training_loop` replaces Trainer's loop (xla)

    def __init__(self, options: BackendOptions | None = None):
        self.options = options if options is not None else self.options_class()

    def check_available(self, args: TrainingArguments) -> None:
        """Raise BackendUnavailable if this backend cannot run with `args` on this machine."""

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """Return the module the Trainer should train (default: the model itself)."""
        return model

    def unwrap_model(self, model: nn.Module) -> nn.Module:
        """Undo `wrap_model` in place (default: nothing to undo)."""
        return model

    def callbacks(self) -> list:
        """TrainerCallbacks the trainer adds for this backend (default: none)."""
        return []

    def summary(self) -> str:
        """What executes the step, in a few words, for the run's summary line."""
        return self.name

    def training_loop(self, trainer):
        """A callable replacing Trainer's inner training loop (same arguments), or None to keep Trainer's."""
        return None

    def report(self) -> dict:
        """What the backend did so far, for logs and the benchmark (e.g. export seconds, fallbacks)."""
        return {}

    def without_trainer(self) -> str | None:
        """Used by `turbotrain.compile` on a bare module: what changes without Trainer's steps, as a warning
        to show (auto cannot time steps there), or None when the backend works the same."""
        return None
