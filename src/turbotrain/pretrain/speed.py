"""The speed probe behind `--minutes`: this machine's seconds per training step for a model of the menu.

`measure_speed` builds the job's own `TurboTrainer` for `cfg` (same data, batch, backend, threads) and trains
`steps` steps into a temporary directory (nothing saved); the first `warm_up` steps are not timed (allocator
and first-call costs), the mean of the rest is the answer (the run's length is a sum of steps). `eval_and_save_seconds` times one held-out
evaluation and one checkpoint-sized save (model, and twice its size for Adam's state) of that model.
The probe prints nothing of its own: no bar or logs (setup.py), and not the trainer's summary line
(`turbotrain: backend ...`), which the run that follows says once, for itself.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from transformers import TrainerCallback

from turbotrain.pretrain.budget import Speed
from turbotrain.pretrain.config import PretrainConfig
from turbotrain.pretrain.metrics import evaluate_masked


class StepClock(TrainerCallback):
    def __init__(self):
        self.ends: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        if not self.ends:
            self.ends.append(time.perf_counter())

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())

    def seconds_per_step(self, warm_up: int) -> float:
        gaps = [b - a for a, b in zip(self.ends, self.ends[1:])][warm_up:]
        return statistics.fmean(gaps)


def measure_speed(cfg: PretrainConfig, prepared, steps: int = 12, warm_up: int = 3) -> Speed:
    """Seconds per step, per held-out evaluation and per checkpoint save of `cfg`'s model on this machine."""
    from turbotrain.pretrain.setup import make_trainer

    probe_cfg = replace(
        cfg, max_steps=steps, learning_rate=cfg.lr, warmup_steps=0, save_steps=10**9, eval_steps=10**9, progress=False
    )
    clock = StepClock()
    with tempfile.TemporaryDirectory(prefix="turbotrain-probe-") as tmp, _without_summary_line():
        trainer = make_trainer(probe_cfg, prepared, tmp, [clock])
        trainer.train()
        begin = time.perf_counter()
        evaluate_masked(trainer.model, prepared.data.eval_batches)
        eval_seconds = time.perf_counter() - begin
        begin = time.perf_counter()
        state = trainer.model.state_dict()
        torch.save({"model": state, "adam": [state, state]}, Path(tmp) / "probe.pt")
        save_seconds = time.perf_counter() - begin
    return Speed(clock.seconds_per_step(warm_up), eval_seconds, save_seconds)


def _not_summary(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("turbotrain: backend ")


@contextlib.contextmanager
def _without_summary_line():
    logger = logging.getLogger("turbotrain")
    logger.addFilter(_not_summary)
    try:
        yield
    finally:
        logger.removeFilter(_not_summary)
