"""`size_run` (sizing.py): --steps keeps a fixed count, --minutes plans from a (fake) speed probe and writes
plan.json, --resume trains the plan the run started with; and the CLI flags that reach it. No training."""

from __future__ import annotations

import time

import pytest
from rich.console import Console

import turbotrain.pretrain as pretrain
from turbotrain.cli import main
from turbotrain.pretrain import PretrainConfig
from turbotrain.pretrain.budget import PLAN_FILE, Plan, Speed
from turbotrain.pretrain.sizing import size_run

QUIET = Console(quiet=True)


class FakeProbe:
    def __init__(self, step: float = 0.2):
        self.step, self.probed = step, []

    def __call__(self, cfg, prepared):
        self.probed.append((cfg.hidden_size, cfg.num_layers, cfg.lr))
        return Speed(self.step, 1.0, 0.5)


def test_fixed_steps_are_kept_and_nothing_is_probed(tmp_path):
    cfg = PretrainConfig(output_dir=str(tmp_path), max_steps=8000)
    sized, plan = size_run(cfg, None, QUIET, time.perf_counter(), measure=_never)
    assert plan is None and sized.max_steps == 8000
    assert (sized.warmup_steps, sized.eval_steps, sized.save_steps, sized.lr) == (400, 1000, 1000, 2e-3)
    assert not (tmp_path / PLAN_FILE).exists()


def test_minutes_plan_the_smallest_model_on_a_slow_machine_and_save_the_plan(tmp_path):
    probe = FakeProbe(step=0.2)
    cfg = PretrainConfig(output_dir=str(tmp_path), minutes=10, backend="eager")
    sized, plan = size_run(cfg, None, QUIET, time.perf_counter(), measure=probe)
    assert probe.probed == [(128, 2, 2e-3)]  # the larger model's 8,000 steps cannot fit: not even probed
    assert sized.max_steps == plan.max_steps and 2000 < plan.max_steps < 3000
    assert (sized.warmup_steps, sized.eval_steps) == (plan.warmup_steps, plan.eval_steps)
    assert Plan.load(tmp_path) == plan


def test_a_faster_machine_and_a_longer_budget_probe_and_choose_the_larger_model(tmp_path):
    probe = FakeProbe(step=0.02)  # the fake returns one speed for both: the larger fits its 8,000 steps
    cfg = PretrainConfig(output_dir=str(tmp_path), minutes=30, backend="eager")
    sized, plan = size_run(cfg, None, QUIET, time.perf_counter(), measure=probe)
    assert len(probe.probed) == 2 and plan.model == "A" and sized.hidden_size == 256 and sized.lr == 1e-3


def test_resume_trains_the_plan_the_run_started_with_without_probing(tmp_path):
    first, plan = size_run(
        PretrainConfig(output_dir=str(tmp_path), backend="eager"), None, QUIET, time.perf_counter(), FakeProbe()
    )
    resumed, kept = size_run(
        PretrainConfig(output_dir=str(tmp_path), minutes=1, resume=True, backend="eager"),
        None,
        QUIET,
        time.perf_counter(),
        _never,
    )
    assert kept == plan and resumed == first.__class__(**{**vars(first), "minutes": 1, "resume": True})


def test_resume_without_a_plan_names_the_fix(tmp_path):
    cfg = PretrainConfig(output_dir=str(tmp_path), resume=True)
    with pytest.raises(ValueError, match="--steps"):
        size_run(cfg, None, QUIET, time.perf_counter(), _never)


def test_a_shape_of_your_own_is_timed_and_trained_as_given(tmp_path):
    probe = FakeProbe(step=0.01)
    cfg = PretrainConfig(output_dir=str(tmp_path), hidden_size=64, num_layers=1, num_heads=2, backend="eager")
    sized, plan = size_run(cfg, None, QUIET, time.perf_counter(), measure=probe)
    assert probe.probed == [(64, 1, 2e-3)] and (sized.hidden_size, plan.model) == (64, "as given")


def _never(cfg, prepared):
    raise AssertionError("probed")


@pytest.mark.parametrize(
    "flags, expected",
    [
        ([], dict(minutes=10.0, max_steps=None, threads=None, learning_rate=None, choose_model=True)),
        (["--minutes", "3.5"], dict(minutes=3.5, max_steps=None)),
        (["--steps", "8000"], dict(max_steps=8000)),
        (["--threads", "1"], dict(threads=1)),
        (["--hidden-size", "256", "--layers", "4", "--heads", "4"], dict(choose_model=False)),
    ],
)
def test_cli_flags_reach_the_config(monkeypatch, tmp_path, flags, expected):
    seen = []
    monkeypatch.setattr(pretrain, "run_pretrain", lambda cfg: seen.append(cfg) or _Done())
    assert main(["pretrain", "--output-dir", str(tmp_path), *flags]) == 0
    assert {key: getattr(seen[0], key) for key in expected} == expected


@pytest.mark.parametrize("flags", [["--minutes", "0"], ["--minutes", "nan"], ["--threads", "0"]])
def test_bad_budget_flags_are_refused_with_one_line(tmp_path, capsys, flags):
    assert main(["pretrain", "--output-dir", str(tmp_path / "o"), "--quiet", *flags]) == 2
    err = capsys.readouterr().err
    assert flags[0] in err and not (tmp_path / "o").exists()


class _Done:
    exit_code = 0


def test_a_budgeted_run_never_pays_autos_uncached_measurement_a_fixed_one_does(tmp_path):
    from turbotrain.pretrain.setup import training_arguments

    budgeted, _ = size_run(PretrainConfig(output_dir=str(tmp_path)), None, QUIET, time.perf_counter(), FakeProbe())
    fixed, _ = size_run(PretrainConfig(output_dir=str(tmp_path / "f"), max_steps=100), None, QUIET, 0.0, _never)
    assert training_arguments(budgeted, str(tmp_path)).backend_options == {"min_steps": budgeted.max_steps + 1}
    assert training_arguments(fixed, str(tmp_path)).backend_options is None
