"""auto: eager or inductor, whichever runs this run's own steps faster, measured (or cached per machine).

How it chooses, per run (`AutoChooser`, a TrainerCallback that times whole optimizer steps):
1. A cached result for this machine and run shape (key: CPU or GPU model, torch version, dtype, model
   class and sizes, batch size, compile scope; `$TURBOTRAIN_CACHE/auto_backend.json`) is used as is.
2. Else, if the run has at least `min_steps` optimizer steps (default 50) and Inductor can run here:
   step 1 eager (warm-up), steps 2..1+m eager, timed (m = `measure_steps`, default 3); then the model is
   compiled in place (`inductor.compile_regions`); the next 2 steps compile (and recompile once for
   dynamic shapes) and are not timed; then m steps inductor, timed. The faster median is kept (eager:
   the compilation is taken off again, `inductor.uncompile`), the choice and both figures are logged
   at WARNING level and cached.
3. Else eager, saying why (run too short to pay a measurement, no C++ compiler...).

Cost bound: every step is eager or inductor, both exact (same losses within fp32 tolerance), so
choosing never changes the numbers. Against always-eager, a run loses at most the compilation time
plus m slower steps, paid once per machine and shape (then cached).

Data parallel: each process measures for itself; a different choice per rank changes only speed.
Options (`backend_options`, `AutoOptions`): min_steps, measure_steps, cache (bool), scope ("model",
"blocks": what inductor compiles, see inductor.py).
"""

from __future__ import annotations

import datetime
import json
import logging
import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn
from transformers import TrainerCallback, TrainingArguments

from turbotrain.backends.base import Backend, BackendOptions, BackendUnavailable
from turbotrain.backends.inductor import SCOPES, InductorBackend, InductorOptions
from turbotrain.backends.registry import register_backend
from turbotrain.modeling import unwrap
from turbotrain.utils.cache import cache_dir, digest, write_atomically
from turbotrain.utils.cpu import cpu_model

logger = logging.getLogger("turbotrain")
CACHE_FILE = "auto_backend.json"
COMPILE_STEPS = 2  # untimed steps after switching: the compile, and one recompile for dynamic shapes


@dataclass(frozen=True)
class AutoOptions(BackendOptions):
    min_steps: int = 50
    measure_steps: int = 3
    cache: bool = True
    scope: str = "model"

    def validate(self) -> None:
        if self.measure_steps < 1 or self.min_steps < 0:
            raise ValueError("measure_steps must be >= 1 and min_steps >= 0")
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {self.scope!r}")


def run_key(args: TrainingArguments, model: nn.Module, scope: str) -> str:
    """Machine and run shape: what a cached choice is valid for."""
    device = torch.cuda.get_device_name(0) if args.device.type == "cuda" else cpu_model()
    dtype = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
    config = unwrap(model).config
    sizes = [
        str(getattr(config, name, ""))
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    ]
    return digest(
        device,
        torch.__version__,
        dtype,
        type(unwrap(model)).__name__,
        *sizes,
        str(args.per_device_train_batch_size),
        str(args.gradient_accumulation_steps),
        scope,
    )


def read_cache(key: str) -> dict | None:
    path = cache_dir() / CACHE_FILE
    try:
        return json.loads(path.read_text()).get(key)
    except (OSError, ValueError):
        return None


def write_cache(key: str, entry: dict) -> None:
    path = cache_dir() / CACHE_FILE
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    table[key] = entry
    write_atomically(path, json.dumps(table, indent=1))


@register_backend
class AutoBackend(Backend):
    name = "auto"
    description = "eager or inductor, whichever measures faster on the run's own steps (cached per machine)"
    options_class = AutoOptions

    def __init__(self, options: AutoOptions | None = None):
        super().__init__(options)
        self.inductor = InductorBackend(InductorOptions(scope=self.options.scope))
        self.args: TrainingArguments | None = None
        self.model: nn.Module | None = None
        self.choice = "eager"
        self.plan = "eager"
        self.figures: dict = {}

    def check_available(self, args: TrainingArguments) -> None:
        self.args = args
        try:
            self.inductor.check_available(args)
        except BackendUnavailable as why:
            self.plan = f"eager ({why})"

    def wrap_model(self, model: nn.Module) -> nn.Module:
        self.model = model
        return model

    def callbacks(self) -> list:
        return [AutoChooser(self)]

    def summary(self) -> str:
        return f"auto: {self.plan}"

    def report(self) -> dict:
        return {"choice": self.choice, **self.figures}

    def use(self, choice: str) -> None:
        """Run the next steps with `choice` ("eager" or "inductor")."""
        if choice == "inductor" and self.choice != "inductor":
            self.inductor.wrap_model(self.model)
        elif choice == "eager" and self.choice == "inductor":
            self.inductor.unwrap_model(self.model)
        self.choice = choice


class AutoChooser(TrainerCallback):
    """Times whole optimizer steps and switches the backend's model between eager and inductor."""

    def __init__(self, backend: AutoBackend):
        self.backend = backend
        self.key = ""
        self.times: dict[str, list[float]] = {"eager": [], "inductor": []}
        self.step = 0
        self.measuring = False
        self.started = 0.0
        self.switched_at = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        b = self.backend
        if b.plan != "eager" or b.model is None:  # no compiler: eager, already said
            return
        options = b.options
        self.key = run_key(args, b.model, options.scope)
        cached = read_cache(self.key) if options.cache else None
        if cached is not None:
            b.figures = {k: v for k, v in cached.items() if k != "choice"}
            b.plan = f"{cached['choice']} (cached measurement of {cached.get('date', '?')}: {_figures(cached)})"
            b.use(cached["choice"])
        elif state.max_steps < options.min_steps:
            b.plan = (
                f"eager (a run of {state.max_steps} steps is too short to pay for measuring inductor: "
                f"needs >= {options.min_steps})"
            )
        else:
            m = options.measure_steps
            b.plan = (
                f"eager, then the faster of eager and inductor, timed on steps 2-{1 + m} and "
                f"{2 + m + COMPILE_STEPS}-{1 + 2 * m + COMPILE_STEPS}"
            )
            self.measuring = True

    def on_step_begin(self, args, state, control, **kwargs):
        if self.measuring:
            _sync()
            self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if not self.measuring:
            return
        _sync()
        seconds = time.perf_counter() - self.started
        self.step += 1
        m = self.backend.options.measure_steps
        if 2 <= self.step <= 1 + m:
            self.times["eager"].append(seconds)
        if self.step == 1 + m:
            self.backend.use("inductor")
            self.switched_at = time.perf_counter()
        if self.step == 1 + m + COMPILE_STEPS:
            self.backend.figures["compile_s"] = round(time.perf_counter() - self.switched_at, 2)
        if self.step > 1 + m + COMPILE_STEPS:
            self.times["inductor"].append(seconds)
        if len(self.times["inductor"]) == m:
            self.decide()

    def decide(self) -> None:
        b = self.backend
        eager, inductor = (statistics.median(self.times[name]) for name in ("eager", "inductor"))
        choice = "inductor" if inductor < eager else "eager"
        b.figures.update(eager_step_s=round(eager, 4), inductor_step_s=round(inductor, 4))
        b.use(choice)
        self.measuring = False
        entry = {"choice": choice, **b.figures, "date": datetime.date.today().isoformat()}
        logger.warning("turbotrain auto: %s chosen after measuring this run's steps (%s)", choice, _figures(entry))
        if b.options.cache:
            write_cache(self.key, entry)


def _figures(entry: dict) -> str:
    shown = [f"eager {entry['eager_step_s']:.3f} s/step", f"inductor {entry['inductor_step_s']:.3f} s/step"]
    if "compile_s" in entry:
        shown.append(f"compile {entry['compile_s']:.1f} s")
    return ", ".join(shown)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
