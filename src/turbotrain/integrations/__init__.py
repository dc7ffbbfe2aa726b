"""What turbotrain knows of the trainer libraries built on Transformers' Trainer: one package per library, each
one table (`integrations/trl/`: TRL's trainers), registered with the trainer layer on import (`register_integration`,
trainer.py) so that `turbo()` and `TurboMixin` ask it for a trainer's facts. Each library's package is declared as an
entry point (`turbotrain.integrations`, pyproject.toml), which `turbo()` loads for a class built on that library, so
`turbotrain.trainer.turbo(DPOTrainer)` has its row too; the lazy front's `turbo` is this package's."""

from __future__ import annotations

from turbotrain.integrations import trl  # noqa: F401  (registers TRL's table)
from turbotrain.trainer import turbo  # noqa: F401  (the lazy front's `turbo`, with every integration registered)
