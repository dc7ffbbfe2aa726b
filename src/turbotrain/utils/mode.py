"""`training_mode(model, on)`: run a block with the model in training (True) or eval (False) mode, and put
back the mode it had, also when the block raises. The install-time probes and self-checks use it."""

from __future__ import annotations

import contextlib

from torch import nn


@contextlib.contextmanager
def training_mode(model: nn.Module, on: bool):
    was_training = model.training
    model.train(on)
    try:
        yield model
    finally:
        model.train(was_training)
