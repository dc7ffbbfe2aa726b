"""The interface every backend implements. A backend decides what executes the training step.

A backend is a small class registered under a name (see `registry.py`). `TurboTrainer` calls, in order:
`check_available()` (raise `BackendUnavailable` naming what to install), `configure(args)` before
`Trainer.__init__` builds its accelerator (for a backend that must change Trainer's arguments; none
of the built-in ones does), then `wrap_model(model)` on the model the Trainer will train (`inductor`
compiles it in place there). A backend whose step cannot run inside Trainer's loop (xla: no
`loss.backward()`) returns its own loop from `training_loop(trainer)`; TurboTrainer then calls it in
place of `Trainer._inner_training_loop`, after Trainer's `train()` has done the setup and resume.
The trainer never branches on a backend's name.
"""

from __future__ import annotations

from typing import ClassVar

from torch import nn
from transformers import TrainingArguments


class BackendUnavailable(RuntimeError):
    """The backend cannot run here; the message says what to install or change."""


class Backend:
    name: ClassVar[str]
    description: ClassVar[str] = ""

    def check_available(self, args: TrainingArguments) -> None:
        """Raise BackendUnavailable if this backend cannot run with `args` on this machine."""

    def configure(self, args: TrainingArguments) -> None:
        """Adjust `args` before the Trainer is built (default: nothing)."""

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """Return the module the Trainer should train (default: the model itself)."""
        return model

    def training_loop(self, trainer):
        """A callable replacing `Trainer._inner_training_loop` (same arguments), or None to keep Trainer's."""
        return None

    def report(self) -> dict:
        """What the backend did so far, for logs and the benchmark (e.g. export seconds, fallbacks)."""
        return {}
