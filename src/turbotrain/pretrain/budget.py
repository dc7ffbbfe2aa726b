"""`--minutes M`: size the main job to end within M minutes of wall time on the machine it runs on.

The budget counts the whole job from `run_pretrain`'s start (corpus, tokenizer, the speed probe, training,
held-out evaluations, checkpoint saves, the final save and the fill-mask lines); Python's imports before it
(~5 s) are not in it. `plan_run` is arithmetic only: given the seconds already spent, the measured seconds per
step of each model on the menu, the measured seconds of one held-out evaluation and of one checkpoint save,
it picks the largest model whose worthwhile step count fits, and the steps, warm-up (5%), held-out evaluation
(every 1/8: one takes ~2 s on a 2-core EPYC) and checkpoint (every 1/8) intervals that end within the budget.

The menu is the sweep's configurations (benchmarks/scripts/pretrain_sweep.py) measured
at a 480 s budget: B and A. At 480 s on a 2-core
Xeon B (h128 x 2, 7,594 steps) reached top-1 28.4% while A (h256 x 4, bf16, 2,678 steps) reached 18.2%
(benchmarks/2026-12-02-cpu-pretrain-sweep.md): a larger model only pays with many more steps. `min_steps` is
the step count below which a model is not chosen: 0 for the smallest (always possible), and for the larger
ones three times the steps at which the sweep saw them lose to B (an estimate, not a measured win).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

PLAN_FILE = "plan.json"
# plan for 80% of the probe's speed: on a 2-core EPYC the probe timed 0.095 s/step and the 10-minute run then
# averaged 0.120 (8.34 steps/s, evaluations included; benchmarks/2026-12-03-cpu-pretrain-budget.md)
SAFETY = 0.8
END_SECONDS = 30.0  # after the last step: final evaluation, save_pretrained, the fill-mask pipeline, loss.png


@dataclass(frozen=True)
class MenuModel:
    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    learning_rate: float
    min_steps: int
    cost: float  # seconds per step relative to the smallest, from the sweep's probes (0.063 / 0.205 s)

    @property
    def label(self) -> str:
        return f"h{self.hidden_size} x {self.num_layers}"


MENU = (
    MenuModel("B", 128, 2, 2, 2e-3, min_steps=0, cost=1.0),
    MenuModel("A", 256, 4, 4, 1e-3, min_steps=8_000, cost=3.3),
)


@dataclass(frozen=True)
class Speed:
    """Measured on this machine (speed.py): seconds per training step, per held-out evaluation, per save."""

    step: float
    evaluation: float
    save: float


@dataclass
class Plan:
    """What a budgeted run trains; written to OUTPUT_DIR/plan.json so `--resume` keeps it."""

    model: str
    hidden_size: int
    num_layers: int
    num_heads: int
    learning_rate: float
    max_steps: int
    warmup_steps: int
    eval_steps: int
    save_steps: int
    seconds_per_step: float
    budget_seconds: float
    deadline_seconds: float  # from the job's start: the last moment a training step may end

    def line(self) -> str:
        return (
            f"~{self.max_steps:,} steps at {1 / self.seconds_per_step:.1f} steps/s fit "
            f"{self.budget_seconds / 60:g} min (model {self.model}: h{self.hidden_size} x {self.num_layers})"
        )

    def save(self, output_dir: str | Path) -> Path:
        path = Path(output_dir) / PLAN_FILE
        path.write_text(json.dumps(asdict(self), indent=2))
        return path

    @classmethod
    def load(cls, output_dir: str | Path) -> Plan | None:
        path = Path(output_dir) / PLAN_FILE
        return cls(**json.loads(path.read_text())) if path.is_file() else None


def intervals(steps: int) -> tuple[int, int, int]:
    """(warm-up, evaluation, checkpoint) steps for a run of `steps`: 5%, every 1/8, every 1/8."""
    return max(1, steps // 20), max(1, steps // 8), max(1, steps // 8)


def steps_that_fit(train_seconds: float, speed: Speed) -> int:
    """Steps whose training, 8 held-out evaluations and 8 checkpoint saves fit `train_seconds`."""
    left = train_seconds - 8 * speed.evaluation - 8 * speed.save
    return max(0, math.floor(SAFETY * left / speed.step))


def plan_run(
    budget_seconds: float,
    spent_seconds: float,
    measured: dict[str, Speed],
    menu: tuple[MenuModel, ...] = MENU,
) -> Plan:
    """The largest menu model (among those `measured`) whose `min_steps` fit what is left of the budget.

    Raises ValueError when not even the smallest model gets 50 steps (the budget is too small)."""
    train_seconds = budget_seconds - spent_seconds - END_SECONDS
    chosen = None
    for model in menu:
        if model.name not in measured:
            continue
        steps = steps_that_fit(train_seconds, measured[model.name])
        if steps >= max(50, model.min_steps):
            chosen = (model, steps)
    if chosen is None:
        raise ValueError(
            f"--minutes {budget_seconds / 60:g} leaves {max(train_seconds, 0):.0f} s for training, fewer than 50 "
            f"steps here; give more minutes or a fixed --steps"
        )
    model, steps = chosen
    warmup, eval_steps, save_steps = intervals(steps)
    return Plan(
        model.name,
        model.hidden_size,
        model.num_layers,
        model.num_heads,
        model.learning_rate,
        steps,
        warmup,
        eval_steps,
        save_steps,
        measured[model.name].step,
        budget_seconds,
        budget_seconds - END_SECONDS,
    )


def worth_probing(model: MenuModel, smallest_seconds: float, train_seconds: float) -> bool:
    """A larger model is probed only when its estimated speed (cost x the smallest's) could fit its min_steps."""
    return model.min_steps * model.cost * smallest_seconds <= train_seconds
