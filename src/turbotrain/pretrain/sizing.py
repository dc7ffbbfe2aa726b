"""The main job's size: a fixed `--steps`, the plan a resumed run started with, or a plan for `--minutes`.

`size_run` returns the config to train (steps, warm-up, intervals, and in a budgeted run the menu model and
its learning rate filled in) and the `Plan` (None for `--steps`). A budgeted run times the smallest menu
model (speed.py), times a larger one only where its estimated speed could fit its `min_steps`, plans
(budget.py), prints the plan in one line and writes it to OUTPUT_DIR/plan.json; `--resume` reads that file
back and trains to the same steps with the same schedule (no probe; a resumed run is not cut at a deadline).
A budgeted run does not pay `--backend auto`'s one-time eager-vs-inductor measurement (on a 2-core EPYC:
compile 58.5 s, then eager kept, 0.113 vs 0.133 s/step): auto uses a cached choice, else eager; `--steps`
runs measure as before.
"""

from __future__ import annotations

import time
from dataclasses import replace

from rich.console import Console

from turbotrain.pretrain.budget import END_SECONDS, MENU, MenuModel, Plan, Speed, plan_run, worth_probing
from turbotrain.pretrain.config import PretrainConfig


def size_run(
    cfg: PretrainConfig, prepared, console: Console, started: float, measure=None
) -> tuple[PretrainConfig, Plan | None]:
    if cfg.max_steps is not None:
        return _with_schedule(cfg, cfg.max_steps), None
    if cfg.resume:
        plan = Plan.load(cfg.output_dir)
        if plan is None:
            raise ValueError(
                f"--resume: {cfg.output_dir} has no plan.json (a run started with --steps resumes with the same --steps)"
            )
        console.print(f"resuming with the plan this run started with: {plan.line()}")
        return _apply(cfg, plan), plan
    plan = _plan(cfg, prepared, console, started, measure)
    console.print(plan.line())
    plan.save(cfg.output_dir)
    return _apply(cfg, plan), plan


def _menu(cfg: PretrainConfig) -> tuple[MenuModel, ...]:
    if cfg.choose_model:
        return MENU
    return (MenuModel("as given", cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.lr, 0, 1.0),)


def _plan(cfg: PretrainConfig, prepared, console: Console, started: float, measure) -> Plan:
    if measure is None:
        from turbotrain.pretrain.speed import measure_speed as measure
    menu, budget = _menu(cfg), cfg.minutes * 60
    measured: dict[str, Speed] = {}
    with console.status("Timing this machine's training steps..."):
        for model in menu:
            spent = time.perf_counter() - started
            if measured and not worth_probing(model, measured[menu[0].name].step, budget - spent - END_SECONDS):
                break
            speed = measured[model.name] = measure(_model_config(cfg, model), prepared)
            console.print(
                f"timed model {model.name} ({model.label}): {speed.step:.3f} s/step, held-out evaluation "
                f"{speed.evaluation:.1f} s, checkpoint {speed.save:.1f} s"
            )
    plan = plan_run(budget, time.perf_counter() - started, measured, menu)
    for model in menu:
        if model.name != plan.model and model.min_steps > plan.max_steps:
            console.print(
                f"model {plan.model} chosen: {model.name} ({model.label}) is worthwhile from {model.min_steps:,} steps, "
                f"{plan.max_steps:,} fit"
            )
    if cfg.learning_rate is not None:
        plan.learning_rate = cfg.learning_rate
    return plan


def _sized(cfg: PretrainConfig, size: MenuModel | Plan, **settings) -> PretrainConfig:
    """`cfg` with the model shape of `size` (a menu model or the plan) and `settings`, the menu's choice made."""
    shape = {"hidden_size": size.hidden_size, "num_layers": size.num_layers, "num_heads": size.num_heads}
    return replace(cfg, **shape, choose_model=False, **settings)


def _model_config(cfg: PretrainConfig, model: MenuModel) -> PretrainConfig:
    return _sized(cfg, model, learning_rate=cfg.learning_rate if cfg.learning_rate is not None else model.learning_rate)


def _with_schedule(cfg: PretrainConfig, steps: int) -> PretrainConfig:
    cfg = replace(cfg, max_steps=steps)
    return replace(
        cfg, warmup_steps=cfg.warmup, eval_steps=cfg.evaluate_every, save_steps=cfg.save_every, learning_rate=cfg.lr
    )


def _apply(cfg: PretrainConfig, plan: Plan) -> PretrainConfig:
    return _sized(
        cfg,
        plan,
        learning_rate=plan.learning_rate,
        max_steps=plan.max_steps,
        warmup_steps=cfg.warmup_steps if cfg.warmup_steps is not None else plan.warmup_steps,
        eval_steps=cfg.eval_steps or plan.eval_steps,
        save_steps=cfg.save_steps or plan.save_steps,
        measure_backend=False,
    )
