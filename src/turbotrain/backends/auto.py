"""auto: eager or inductor, whichever runs this run's own steps faster, measured (or cached per machine).

How it chooses, per run (`AutoChooser`, a TrainerCallback that times whole optimizer steps):
1. A cached result for this machine and run (`run_key`: CPU or GPU model, torch version, dtype of the
   run and of the weights, model class and sizes, attention implementation, the passes installed, batch
   size, gradient accumulation and checkpointing, world size, compile scope, and the length bucket of the
   training examples; `$TURBOTRAIN_CACHE/auto_backend.json`) is used as is: each of these changes which
   backend is faster, so a choice is reused only where all of them match.
   A cached inductor choice is not compiled for a run whose steps at the cached eager speed come to less than
   `min_eager_s` (below).
2. Else, if the run has at least `min_steps` optimizer steps (default 50) and Inductor can run here:
   step 1 eager (warm-up), then m eager steps timed (m = `measure_steps`, default 8). If the rest of the run at
   eager's median takes less than `min_eager_s` (default 120 s), eager is kept, said and not cached: compiling
   costs tens of seconds (9.5-60 s measured on a 2-core EPYC; 17.1 s for a 2-layer BERT whose whole 80-step run
   took 1.9 s eager, which measuring made 19.3 s), more than such a rest could win back. Else the model is
   compiled in place (`inductor.compile_regions`) and steps run inductor until m of them ran without a
   Dynamo compile: a step that compiled or recompiled (the first ones, a new dynamic size) is not timed
   (its time is reported as compile_s). The faster median is kept (eager: the compilation is taken off
   again, `inductor.uncompile`), the choice and both figures are logged at WARNING level and cached.
   If inductor keeps recompiling (`MAX_COMPILING_STEPS` steps that compiled), eager is kept and said so.
3. Else eager, saying why (run too short to pay a measurement, no C++ compiler...). With Trainer's own
   `torch_compile=True` auto steps aside: the model is compiled once, by Trainer (inductor, onnxruntime and xla
   refuse to start under it; eager runs under it).
Each `train()` plans anew (`steps_left` counts from a resumed run's step).
Outside Trainer (`turbotrain.compile(module, backend="auto")`) there are no steps to time: the module
runs eager, and one warning says so and names the backends to choose instead.

Cost bound: every step is eager or inductor, both exact (same losses within fp32 tolerance), so
choosing never changes the numbers. Against always-eager, a run loses at most the compilation time
plus m slower steps, paid once per machine and shape (then cached), and only by a run with at least
`min_eager_s` of eager steps left to win it back in.

Data parallel: each process measures for itself; a different choice per rank changes only speed.
Options (`backend_options`, `AutoOptions`): min_steps, measure_steps, min_eager_s, cache (bool), scope ("model",
"blocks": what inductor compiles, see inductor.py). "model" stays the default: on a GPT-2-shaped bf16 run
(h512, 6 layers, vocabulary 50,257, batch 16 x 128, 60 steps) auto timed whole-model inductor 1.16x eager
and kept it (1.09x stock bf16), while with "blocks" inductor timed equal to eager (1.00x) and eager was kept
(benchmarks/2026-12-02-cpu-auto-scope.md; measured before `min_eager_s`, under which that 60-step run, ~90 s of
eager steps left, would keep eager unmeasured).
"""

from __future__ import annotations

import datetime
import logging
import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn
from transformers import TrainerCallback, TrainingArguments

from turbotrain.backends.backend_registry import register_backend
from turbotrain.backends.base import Backend, BackendOptions, BackendUnavailable
from turbotrain.backends.inductor import SCOPES, InductorBackend, InductorOptions
from turbotrain.boundaries.hf_boundary import attention_implementation
from turbotrain.modeling import unwrap
from turbotrain.passes.optimize import REPORT_ATTRIBUTE
from turbotrain.utils.cache import digest, read_entry, write_entry
from turbotrain.utils.cpu import cpu_model
from turbotrain.utils.random_state import random_state_kept

logger = logging.getLogger("turbotrain")
CACHE_FILE = "auto_backend.json"
MAX_COMPILING_STEPS = 8  # inductor steps that compiled before auto gives up on it (recompiling every step)
LENGTH_SAMPLE = 256  # training examples whose lengths set the run's length bucket


@dataclass(frozen=True)
class AutoOptions(BackendOptions):
    min_steps: int = 50
    measure_steps: int = 8
    min_eager_s: float = 120.0  # eager seconds the run must have left after the eager steps for inductor's compile
    cache: bool = True
    scope: str = "model"

    def validate(self) -> None:
        if self.measure_steps < 1 or self.min_steps < 0 or self.min_eager_s < 0:
            raise ValueError("measure_steps must be >= 1, min_steps >= 0 and min_eager_s >= 0")
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {self.scope!r}")


def run_key(args: TrainingArguments, model: nn.Module, scope: str, length: str = "?") -> str:
    """Machine and run: what a cached choice is valid for (every part changes which backend is faster)."""
    return digest(*run_key_parts(args, model, scope, length))


def run_key_parts(args: TrainingArguments, model: nn.Module, scope: str, length: str = "?") -> list[str]:
    device = torch.cuda.get_device_name(args.device) if args.device.type == "cuda" else cpu_model()
    dtype = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
    inner = unwrap(model)
    config = getattr(inner, "config", None)  # a plain nn.Module (stock Trainer trains one) has none
    sizes = [
        str(getattr(config, name, ""))
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    ]
    if config is None:  # its sizes are its parameters'
        sizes[0] = f"{sum(p.numel() for p in inner.parameters())} parameters"
    first = next(inner.parameters(), None)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)  # LoRA's adapters, or every weight
    report = getattr(model, REPORT_ATTRIBUTE, None)
    passes = ",".join(report.applied) if report is not None else "none"
    return [
        device,
        torch.__version__,
        dtype,
        str(first.dtype) if first is not None else "?",
        type(inner).__name__,
        *sizes,
        str(attention_implementation(config)),
        passes,
        str(args.per_device_train_batch_size),
        str(args.gradient_accumulation_steps),
        str(bool(args.gradient_checkpointing)),
        str(args.world_size),
        str(getattr(args, "n_gpu", 1)),  # nn.DataParallel over that many
        f"{trained} trained",
        f"tf32 {torch.backends.cuda.matmul.allow_tf32}" if args.device.type == "cuda" else "",
        scope,
        length,
    ]


def length_bucket(dataloader) -> str:
    """The power of two at or above the longest of the first training examples (or "?" when unknown). Read with
    the run's random generators kept: a transform that augments would otherwise move them (utils/random_state.py)."""
    try:
        dataset = dataloader.dataset
        count = min(len(dataset), LENGTH_SAMPLE)
        with random_state_kept():
            longest = max(len(dataset[i]["input_ids"]) for i in range(count))
    except Exception:  # an iterable dataset, examples without input_ids (speech, images): no length part
        return "?"
    return str(1 << max(longest - 1, 0).bit_length())


def compiles_so_far() -> int:
    """Graphs Dynamo and AOTAutograd compiled in this process so far (a step that raises it compiled)."""
    from turbotrain.boundaries.torch_boundary import compiled_graph_count

    return compiled_graph_count()


def read_cache(key: str) -> dict | None:
    return read_entry(CACHE_FILE, key)


def write_cache(key: str, entry: dict) -> None:
    write_entry(CACHE_FILE, key, entry)


@register_backend
class AutoBackend(Backend):
    name = "auto"
    options_class = AutoOptions

    def __init__(self, options: AutoOptions | None = None):
        super().__init__(options)
        self.inductor = InductorBackend(InductorOptions(scope=self.options.scope))
        self.args: TrainingArguments | None = None
        self.model: nn.Module | None = None
        self.choice = "eager"
        self.plan = "eager"
        self.unavailable: str | None = None  # why auto cannot measure here (the plan of every run), or None
        self.figures: dict = {}

    def check_available(self, args: TrainingArguments) -> None:
        self.args = args
        if getattr(args, "torch_compile", False):  # Trainer compiles the model (accelerate): a 2nd compile nests
            compiler = getattr(args, "torch_compile_backend", None) or "inductor"
            self.unavailable = (
                f"Trainer's own torch.compile (torch_compile=True, {compiler}); auto adds and measures nothing"
            )
        else:
            try:
                self.inductor.check_available(args)
            except BackendUnavailable as why:
                self.unavailable = f"eager ({why})"
        self.plan = self.unavailable or self.plan

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """A new model (Trainer's `model_init` makes one per training or trial) starts eager, its choice new."""
        self.model, self.choice = model, "eager"
        return model

    def callbacks(self) -> list:
        return [AutoChooser(self)]

    def summary(self) -> str:
        return f"auto: {self.plan}"

    def report(self) -> dict:
        return {"choice": self.choice, **self.figures}

    def without_trainer(self) -> str:
        self.plan = "eager (outside Trainer: no steps to measure)"
        return (
            "turbotrain.compile(backend='auto'): auto chooses by timing whole Trainer steps, which a bare module "
            "does not have, so the module runs eager; choose backend='inductor' or 'onnxruntime' to compile it, or "
            "train it with TurboTrainer, where auto measures"
        )

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
        self.reset()

    def reset(self) -> None:
        """Nothing measured yet (each `train()` starts here)."""
        self.key = ""
        self.times: dict[str, list[float]] = {"eager": [], "inductor": []}
        self.step = 0
        self.measuring = False
        self.started = 0.0
        self.compiles_before = 0
        self.compiling_steps = 0
        self.compile_s = 0.0
        self.steps_left: int | None = None  # the run's steps still to run when training began (None: unknown)

    def on_train_begin(self, args, state, control, **kwargs):
        """Each `train()` plans anew (a second call, a hyperparameter trial's new model, a resume)."""
        b = self.backend
        self.reset()
        b.plan, b.figures = b.unavailable or "eager", {}
        if b.unavailable is not None or b.model is None:  # no compiler, Trainer's torch.compile: said in the plan
            return
        options = b.options
        steps_left = state.max_steps - state.global_step  # a resumed run has only these to pay a measurement back
        self.key = run_key(args, b.model, options.scope, length_bucket(kwargs.get("train_dataloader")))
        cached = read_cache(self.key) if options.cache else None
        if cached is not None:
            b.figures = {k: v for k, v in cached.items() if k != "choice"}
            b.use(self.cached_choice(cached, steps_left))
        elif steps_left < options.min_steps:
            b.use("eager")
            b.plan = (
                f"eager (a run of {steps_left} steps is too short to pay for measuring inductor: "
                f"needs >= {options.min_steps})"
            )
        else:
            m = options.measure_steps
            compiled = "its repeated blocks" if options.scope == "blocks" else "the whole model"
            b.plan = (
                f"eager, then the faster of eager and inductor ({compiled}), timed on {m} eager steps after a "
                f"warm-up and on {m} inductor steps that did not compile"
            )
            b.use("eager")
            self.measuring = True
            self.steps_left = steps_left

    def cached_choice(self, cached: dict, steps_left: int) -> str:
        """The cached choice, said in the plan; eager where it is inductor but this run's steps at the cached
        eager speed come to less than `min_eager_s` (the compile would not pay here)."""
        b, minimum = self.backend, self.backend.options.min_eager_s
        measured = f"cached measurement of {cached.get('date', '?')}: {_figures(cached)}"
        eager_s = steps_left * cached.get("eager_step_s", 0.0)
        if cached["choice"] != "inductor" or eager_s >= minimum:
            b.plan = f"{cached['choice']} ({measured})"
            return cached["choice"]
        b.plan = (
            f"eager (a {measured} chose inductor, but this run's {steps_left} steps at that eager speed, "
            f"{eager_s:.0f} s, are too short to pay for compiling: needs >= {minimum:g} s)"
        )
        return "eager"

    def on_train_end(self, args, state, control, **kwargs):
        if self.measuring:  # stopped early (a callback, min_steps below the measurement's steps): nothing cached
            self.measuring = False
            self.backend.plan = f"{self.backend.choice} (the run ended before auto finished measuring)"

    def on_step_begin(self, args, state, control, **kwargs):
        if self.measuring:
            _sync(getattr(args, "device", None))
            self.compiles_before = compiles_so_far()
            self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if not self.measuring:
            return
        _sync(getattr(args, "device", None))
        seconds = time.perf_counter() - self.started
        self.step += 1
        m = self.backend.options.measure_steps
        if self.backend.choice == "eager":
            if self.step > 1:  # step 1 warms up
                self.times["eager"].append(seconds)
            if len(self.times["eager"]) == m and not self.too_short_to_pay():
                self.backend.use("inductor")
            return
        if compiles_so_far() > self.compiles_before:  # this step compiled or recompiled: not a steady step
            self.compiling_steps += 1
            self.compile_s += seconds
            self.backend.figures["compile_s"] = round(self.compile_s, 2)
            if self.compiling_steps > MAX_COMPILING_STEPS:
                self.give_up()
            return
        self.times["inductor"].append(seconds)
        if len(self.times["inductor"]) == m:
            self.decide()

    def too_short_to_pay(self) -> bool:
        """After the eager steps: keep eager (said, not cached: it is this run's length, not the machine's answer)
        when the rest of the run at eager's median is under `min_eager_s`, too short for a compile to pay."""
        if self.steps_left is None:
            return False
        eager = statistics.median(self.times["eager"])
        left = self.steps_left - self.step
        minimum = self.backend.options.min_eager_s
        if left * eager >= minimum:
            return False
        self.measuring = False
        self.backend.figures.update(eager_step_s=round(eager, 4))
        self.backend.plan = (
            f"eager (the rest of the run, {left} steps at eager's {eager:.3f} s/step = {left * eager:.0f} s, is too "
            f"short to pay for compiling inductor: measuring needs >= {minimum:g} s of eager steps left)"
        )
        logger.warning("turbotrain auto: %s", self.backend.plan)
        return True

    def give_up(self) -> None:
        """Inductor compiled on too many steps to be measured (or to pay): eager, said and cached."""
        b = self.backend
        b.use("eager")
        self.measuring = False
        b.figures.update(eager_step_s=round(statistics.median(self.times["eager"]), 4), inductor_step_s=None)
        b.plan = f"eager (inductor compiled again on {self.compiling_steps} steps: recompiling)"
        logger.warning(
            "turbotrain auto: eager chosen: inductor compiled again on %d steps (recompiling, e.g. on shapes that "
            "keep changing)",
            self.compiling_steps,
        )
        if b.options.cache:
            write_cache(self.key, {"choice": "eager", **b.figures, "date": datetime.date.today().isoformat()})

    def decide(self) -> None:
        b = self.backend
        eager, inductor = (statistics.median(self.times[name]) for name in ("eager", "inductor"))
        choice = "inductor" if inductor < eager else "eager"
        b.figures.update(eager_step_s=round(eager, 4), inductor_step_s=round(inductor, 4))
        b.use(choice)
        self.measuring = False
        entry = {"choice": choice, **b.figures, "date": datetime.date.today().isoformat()}
        b.plan = f"{choice} (measured on this run's steps: {_figures(entry)})"
        logger.warning("turbotrain auto: %s chosen after measuring this run's steps (%s)", choice, _figures(entry))
        if b.options.cache:
            write_cache(self.key, entry)


def _figures(entry: dict) -> str:
    inductor = entry.get("inductor_step_s")
    shown = [
        f"eager {entry['eager_step_s']:.3f} s/step",
        f"inductor {inductor:.3f} s/step" if inductor is not None else "inductor kept recompiling",
    ]
    if "compile_s" in entry:
        shown.append(f"compile {entry['compile_s']:.1f} s")
    return ", ".join(shown)


def _sync(device: torch.device | None) -> None:
    """Wait for the run's device: CUDA's only where the run is on it (a CPU run on a GPU machine makes no CUDA
    context)."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
