"""The main job's callbacks and time-to-quality arithmetic, on hand-made states (no training)."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import TrainerControl, TrainerState

from turbotrain.pretrain.callbacks import CurvePoint, Curves, StopOnNonFinite
from turbotrain.pretrain.compare import time_to_loss, time_to_quality


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
