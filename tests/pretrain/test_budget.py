"""The `--minutes` planner's arithmetic (budget.py) and the plan a resumed run keeps: no clock, no training."""

from __future__ import annotations

import pytest

from turbotrain.pretrain.budget import END_SECONDS, MENU, SAFETY, MenuModel, Plan, Speed, intervals, plan_run

FAST = Speed(step=0.1, evaluation=1.0, save=0.5)


def test_steps_fill_what_is_left_after_spent_time_evaluations_saves_and_the_end():
    plan = plan_run(600, spent_seconds=60, measured={"B": FAST})
    train = 600 - 60 - END_SECONDS - 8 * 1.0 - 8 * 0.5
    assert plan.max_steps == int(SAFETY * train / 0.1)
    assert (plan.warmup_steps, plan.eval_steps, plan.save_steps) == intervals(plan.max_steps)
    assert plan.model == "B" and plan.deadline_seconds == 600 - END_SECONDS
    assert plan.line().startswith(f"~{plan.max_steps:,} steps at 10.0 steps/s fit 10 min")


def test_a_slower_machine_gets_proportionally_fewer_steps():
    fast = plan_run(600, 30, {"B": FAST}).max_steps
    slow = plan_run(600, 30, {"B": Speed(0.3, 1.0, 0.5)}).max_steps
    assert slow == pytest.approx(fast / 3, abs=2)


def test_intervals_are_five_percent_and_sixteenths_and_eighths():
    assert intervals(8000) == (400, 1000, 1000)
    assert intervals(10) == (1, 1, 1)


def test_the_largest_model_whose_worthwhile_steps_fit_is_chosen():
    big = Speed(0.05 * MENU[1].cost, 1.0, 0.5)
    needs = MENU[1].min_steps
    roomy = plan_run(needs * big.step / SAFETY + 200, 0, {"B": Speed(0.05, 1.0, 0.5), "A": big})
    assert roomy.model == "A" and roomy.max_steps >= needs and roomy.hidden_size == MENU[1].hidden_size
    tight = plan_run(600, 0, {"B": Speed(0.05, 1.0, 0.5), "A": big})
    assert tight.model == "B" and tight.hidden_size == 128


def test_a_budget_too_small_for_fifty_steps_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match="--minutes"):
        plan_run(60, 50, {"B": FAST})


def test_an_unmeasured_model_is_never_chosen():
    menu = (MenuModel("small", 64, 1, 1, 1e-3, 0, 1.0), MenuModel("huge", 512, 8, 8, 1e-4, 0, 9.0))
    assert plan_run(600, 0, {"small": FAST}, menu).model == "small"


def test_the_plan_round_trips_through_the_output_directory(tmp_path):
    plan = plan_run(600, 10, {"B": FAST})
    plan.save(tmp_path)
    assert Plan.load(tmp_path) == plan
    assert Plan.load(tmp_path / "nowhere") is None
