"""The main job's callbacks and time-to-quality arithmetic, on hand-made states (no training)."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import TrainerControl, TrainerState

from turbotrain.pretrain.callbacks import CurvePoint, Curves, HeldOutCurve, StopAtDeadline, StopOnNonFinite
from turbotrain.pretrain.compare import time_to_loss, time_to_quality
from turbotrain.pretrain.metrics import HeldOut


@pytest.mark.parametrize("logs", [{"loss": float("nan")}, {"loss": 2.0, "grad_norm": float("inf")}])
def test_non_finite_log_stops_the_run_without_saving(logs):
    callback, control = StopOnNonFinite(), TrainerControl(should_save=True)
    callback.on_log(None, TrainerState(global_step=7), control, logs=logs)
    assert control.should_training_stop and not control.should_save
    assert callback.step == 7 and ("nan" in callback.reason or "inf" in callback.reason)


def test_finite_logs_and_weights_go_on():
    callback, control = StopOnNonFinite(), TrainerControl(should_save=True)
    callback.on_log(None, TrainerState(global_step=3), control, logs={"loss": 2.0, "grad_norm": 1.0})
    callback.on_step_end(None, TrainerState(global_step=3), control, model=torch.nn.Linear(2, 2))
    assert control.should_save and not control.should_training_stop and callback.reason is None


def test_non_finite_weights_are_never_saved():
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight[0, 0] = math.nan
    callback, control = StopOnNonFinite(), TrainerControl(should_save=True)
    callback.on_step_end(None, TrainerState(global_step=9), control, model=model)
    assert not control.should_save and control.should_training_stop and "weights" in callback.reason


def _curve(points):
    return [CurvePoint(step, seconds, value) for step, seconds, value in points]


def test_time_to_loss_interpolates_between_evaluations():
    points = _curve([(10, 1.0, 6.0), (20, 3.0, 5.0), (30, 5.0, 4.0)])
    assert time_to_loss(points, 4.5) == (pytest.approx(4.0), 30)
    assert time_to_loss(points, 6.5) == (1.0, 10)
    with pytest.raises(ValueError, match="never reached"):
        time_to_loss(points, 3.0)


def test_time_to_quality_targets_the_loss_both_runs_reach():
    stock = Curves(held_out=_curve([(10, 4.0, 6.0), (20, 8.0, 5.0)]))
    turbo = Curves(held_out=_curve([(10, 1.0, 6.0), (20, 2.0, 4.9)]))
    ttq = time_to_quality(stock, turbo)
    assert ttq.target_loss == 5.0 and ttq.stock_seconds == 8.0
    assert ttq.turbo_seconds == pytest.approx(1.0 + (1.0 / 1.1)) and ttq.speedup == pytest.approx(
        8.0 / ttq.turbo_seconds
    )


def test_the_deadline_stops_before_a_step_that_would_end_after_it():
    now = [0.0]
    callback = StopAtDeadline(deadline=10.0, clock=lambda: now[0])
    state, control = TrainerState(global_step=0, max_steps=100), TrainerControl()
    for step, at in enumerate([1.0, 3.0, 5.0, 7.0, 8.0], start=1):  # steps of 2 s, then one of 1 s
        now[0], state.global_step = at, step
        callback.on_step_end(None, state, control)
        assert not control.should_training_stop, step  # the slowest recent step (2 s) still fits
    now[0], state.global_step = 8.5, 6
    callback.on_step_end(None, state, control)  # 8.5 + 2 > 10: stop here
    assert control.should_training_stop and callback.stopped_at == 6


def test_the_deadline_never_stops_the_planned_last_step():
    callback = StopAtDeadline(deadline=0.0, clock=lambda: 5.0)
    state, control = TrainerState(global_step=100, max_steps=100), TrainerControl()
    callback.on_step_end(None, state, control)
    callback.on_step_end(None, state, control)
    assert callback.stopped_at is None


def test_a_run_stopped_early_is_evaluated_at_its_last_step(monkeypatch):
    import turbotrain.pretrain.callbacks as callbacks

    scored = HeldOut(loss=2.0, top1=0.5, top5=0.7)
    monkeypatch.setattr(callbacks, "evaluate_masked", lambda model, batches: scored)
    curve = HeldOutCurve([], every=500)
    state = TrainerState(global_step=123, max_steps=1000)
    curve.on_step_end(None, state, TrainerControl())
    assert curve.curves.last is None  # not an evaluation step
    curve.on_step_end(None, state, TrainerControl(should_training_stop=True))
    assert curve.curves.last is scored and curve.curves.held_out[-1].step == 123
