"""Wall time of every optimizer step of a Trainer run, end to end (data loading, collation, forward,
backward, optimizer, logging): `StepClock`, a callback. On CUDA each step end synchronizes first, so a
step's time includes its kernels (a benchmark's clock; a run that is not measured should not carry it)."""

from __future__ import annotations

import time

import torch
from transformers import TrainerCallback


class StepClock(TrainerCallback):
    def __init__(self):
        self.ends: list[float] = []
        self.start = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.ends.append(time.perf_counter())

    def step_seconds(self) -> list[float]:
        marks = [self.start, *self.ends]
        return [b - a for a, b in zip(marks, marks[1:])]
