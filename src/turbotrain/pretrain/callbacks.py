"""`TrainerCallback`s of the main job; each works with stock `Trainer` and `TurboTrainer` alike.

* `HeldOutCurve`: every `every` steps (and at the last), scores the fixed held-out batches (metrics.py)
  and records step, training wall time (evaluation and checkpoint-saving time excluded) and the training losses Trainer logs.
* `StopOnNonFinite`: a non-finite logged loss or grad norm, or non-finite weights about to be saved,
  stops the run before anything is saved, so the last checkpoint on disk is the last good one.
* `StopAtDeadline`: a budgeted run (`--minutes`) ends its training at the step whose successor would end
  after the plan's deadline (the machine got slower than the probe measured); the last step is evaluated.
* `StopOnSignal`: SIGINT/SIGTERM ask for a checkpoint and a clean stop at the end of the current step
  (a second signal restores the default handler: a third Ctrl-C kills as usual).
* `JobClock`: the whole job's wall time, written into every checkpoint (`trainer_state.json`'s
  `stateful_callbacks`, as Trainer saves an `ExportableState` callback's `state()`), so a resumed run counts the
  time that made its steps: the earlier parts up to the checkpoint it resumed from (`seconds_at`), plus its own.
"""

from __future__ import annotations

import json
import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from turbotrain.pretrain.metrics import HeldOut, evaluate_masked


@dataclass
class CurvePoint:
    step: int
    seconds: float
    value: float


@dataclass
class Curves:
    train: list[CurvePoint] = field(default_factory=list)
    held_out: list[CurvePoint] = field(default_factory=list)
    last: HeldOut | None = None


class HeldOutCurve(TrainerCallback):
    def __init__(self, batches: list[dict], every: int, label: str = ""):
        self.batches, self.every, self.label = batches, max(1, every), label
        self.curves = Curves()
        self.start_step = 0
        self.paused_seconds = 0.0
        self._start = self._save_began = 0.0

    def train_seconds(self) -> float:
        return time.perf_counter() - self._start - self.paused_seconds

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._start, self.paused_seconds, self.start_step = time.perf_counter(), 0.0, state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.curves.train.append(CurvePoint(state.global_step, self.train_seconds(), float(logs["loss"])))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self._save_began = time.perf_counter()
        last = state.global_step == state.max_steps or control.should_training_stop
        if state.global_step % self.every and not last:
            return
        seconds, begin = self.train_seconds(), time.perf_counter()
        self.curves.last = evaluate_masked(model, self.batches)
        self.curves.held_out.append(CurvePoint(state.global_step, seconds, self.curves.last.loss))
        self.paused_seconds += time.perf_counter() - begin
        self._save_began = time.perf_counter()

    def on_save(self, args, state, control, **kwargs):
        self.paused_seconds += time.perf_counter() - self._save_began


class StopAtDeadline(TrainerCallback):
    """Stops training when one more step, at the slowest of the last ones, would end after `deadline`
    (a `time.perf_counter()` value; `clock` for tests); `stopped_at` is then the last step trained."""

    def __init__(self, deadline: float, clock=time.perf_counter):
        self.deadline, self.clock = deadline, clock
        self.stopped_at: int | None = None
        self._last: float | None = None
        self._recent: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        now = self.clock()
        if self._last is not None:
            self._recent = [*self._recent[-4:], now - self._last]
        self._last = now
        if self._recent and now + max(self._recent) > self.deadline and state.global_step < state.max_steps:
            self.stopped_at = state.global_step
            control.should_training_stop = True


class StopOnNonFinite(TrainerCallback):
    """Sets `reason` (and stops the run, nothing saved) when the loss, grad norm or weights stop being finite."""

    def __init__(self):
        self.reason: str | None = None
        self.step: int | None = None

    def _stop(self, control, state, reason: str) -> None:
        self.reason, self.step = self.reason or reason, state.global_step
        control.should_save = False
        control.should_evaluate = False
        control.should_training_stop = True

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if control.should_save and model is not None and not _weights_finite(model):
            self._stop(control, state, "the weights are no longer finite")

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in ("loss", "grad_norm"):
            value = (logs or {}).get(key)
            if value is not None and not math.isfinite(float(value)):
                self._stop(control, state, f"the {key.replace('_', ' ')} is {value}")


def _weights_finite(model: torch.nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


class StopOnSignal(TrainerCallback):
    """While installed (`with StopOnSignal() as stop:`), SIGINT/SIGTERM save a checkpoint and stop the run."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.received: int | None = None
        self._previous: dict = {}

    def __enter__(self) -> StopOnSignal:
        self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame) -> None:
        if self.received is not None:  # asked twice: the next one is not caught
            signal.signal(signum, signal.SIG_DFL if signum == signal.SIGTERM else signal.default_int_handler)
        self.received = signum

    @property
    def name(self) -> str | None:
        return signal.Signals(self.received).name if self.received is not None else None

    def on_step_end(self, args, state, control, **kwargs):
        if self.received is not None:
            control.should_save = True
            control.should_training_stop = True


class JobClock(TrainerCallback, ExportableState):
    """Seconds of the whole job: `before` (the earlier parts, read back from `resumed_from`, the checkpoint a
    resumed run starts from) plus the time since `started` (a `time.perf_counter()` value: this part's start)."""

    def __init__(self, started: float, resumed_from: str | None = None, clock=time.perf_counter):
        self.started, self.resumed_from, self.clock = started, resumed_from, clock
        self.before = self.seconds_at(resumed_from) if resumed_from is not None else 0.0

    def seconds(self) -> float:
        return self.before + self.clock() - self.started

    def state(self) -> dict:
        return {"args": {}, "attributes": {"job_seconds": round(self.seconds(), 3)}}

    @staticmethod
    def seconds_at(checkpoint: str | Path | None) -> float:
        """The job's seconds when `checkpoint` was saved (0 for none, or one saved without a JobClock)."""
        try:
            saved = json.loads((Path(checkpoint) / "trainer_state.json").read_text())["stateful_callbacks"]
            return float(saved["JobClock"]["attributes"]["job_seconds"])
        except (TypeError, OSError, ValueError, KeyError):
            return 0.0
