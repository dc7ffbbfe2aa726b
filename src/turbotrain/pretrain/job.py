"""The main job: pretrain a RoBERTa-style masked LM from scratch on the built-in corpus (or your files).

Steps: refuse a folder holding an earlier run unless --resume or --overwrite, lock and check the output
directory (guard.py) -> torch's threads (utils/threads.py) -> collect the corpus -> train a byte-level BPE
tokenizer -> paragraphs at natural length, 3% held out with fixed masks (data.py) -> the run's size:
`--minutes` (default 10) times this machine's steps and plans model, steps and schedule to end within the
budget, `--steps N` trains N steps (sizing.py) -> train with `TurboTrainer`
(padding-free packing, label sparsity; committed checkpoints every `save_steps`, `--resume`; SIGINT /
SIGTERM save and stop; a non-finite loss, grad norm or weight stops the run keeping the last good
checkpoint) -> held-out loss, top-1/top-5 against the unigram baseline -> `save_pretrained` -> a stock
`fill-mask` pipeline guesses ~10 held-out sentences (probes.py; one line when the run stayed on the unigram
plateau, summary.py) -> `loss.png` (plot.py). The job draws its own bar (progress.py) and keeps its wall time in
every checkpoint (callbacks.JobClock): after `--resume` the summary's time is the whole job's.
`--compare` first trains the same model with stock `Trainer` and reports time-to-quality (compare.py).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from turbotrain.pretrain.callbacks import (
    Curves,
    HeldOutCurve,
    JobClock,
    StopAtDeadline,
    StopOnNonFinite,
    StopOnSignal,
)
from turbotrain.pretrain.compare import TimeToQuality, time_to_quality
from turbotrain.pretrain.config import PretrainConfig
from turbotrain.pretrain.fill_mask_probes import Guess, choose_probes, fill_mask
from turbotrain.pretrain.guard import PRETRAIN_RUN, OutputDirLock
from turbotrain.pretrain.metrics import HeldOut
from turbotrain.pretrain.progress import JobProgress
from turbotrain.pretrain.quiet import quiet_libraries, quiet_tied_missing_keys
from turbotrain.pretrain.setup import Prepared, make_trainer, prepare
from turbotrain.pretrain.sizing import size_run
from turbotrain.pretrain.summary import print_data, print_summary, resume_line
from turbotrain.training.checkpoints import last_complete_checkpoint
from turbotrain.utils.plotting import is_matplotlib_available
from turbotrain.utils.threads import set_threads

SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}


class TrainingStopped(RuntimeError):
    """A run stopped because its numbers stopped being finite (exit code 1, last good checkpoint kept)."""


@dataclass
class PretrainResult:
    output_dir: Path
    held_out: HeldOut | None
    unigram_top1: float
    unigram_top5: float
    train_seconds: float
    tokens_per_second: float
    guesses: list[Guess]
    curves: Curves
    steps: int = 0
    wall_seconds: float = 0.0  # the whole job, from run_pretrain's start to the summary (and the parts before a resume)
    part_steps: int = 0  # the steps this part trained (all of them, unless it resumed)
    resumed_seconds: float = 0.0  # the job's seconds up to `resumed_from` (callbacks.JobClock)
    resumed_from: str | None = None
    planned_steps: int | None = None  # a budgeted run's plan, when the deadline stopped it before
    stopped_by: str | None = None
    compare: TimeToQuality | None = None
    plot: Path | None = None

    @property
    def exit_code(self) -> int:
        return SIGNAL_EXIT.get(self.stopped_by, 1) if self.stopped_by else 0


MASKED_SHARE = 0.15  # the collator's mlm_probability (pretrain/data.py)


def run_pretrain(cfg: PretrainConfig, console: Console | None = None, measure=None) -> PretrainResult:
    """`measure`: the speed probe (speed.measure_speed; tests pass their own)."""
    started = time.perf_counter()
    console = console or Console(quiet=not cfg.progress, soft_wrap=True)
    quiet_libraries()
    PRETRAIN_RUN.claim(cfg.output_dir, cfg.overwrite, cfg.resume)  # an earlier run: refused before anything is made
    with OutputDirLock(cfg.output_dir):
        replacing = PRETRAIN_RUN.claim(cfg.output_dir, cfg.overwrite, cfg.resume)  # again: one finished meanwhile
        if replacing:
            print(f"turbotrain pretrain: {replacing}", file=sys.stderr, flush=True)  # said under --quiet too
        console.print(set_threads(cfg.threads).line())
        with console.status("Collecting the corpus and training the tokenizer..."):
            prepared = prepare(cfg)
        cfg, plan = size_run(cfg, prepared, console, started, measure)
        print_data(console, cfg, prepared)
        stock = _train_stock(cfg, prepared, console) if cfg.compare else None
        deadline = started + plan.deadline_seconds if plan and not (cfg.resume or cfg.compare) else None
        return _train_turbo(cfg, prepared, console, stock, deadline, started)


def _train_stock(cfg: PretrainConfig, prepared: Prepared, console: Console) -> Curves:
    console.print("[bold]--compare[/]: training the same model with stock Trainer first (same seed, same batches)")
    curve = HeldOutCurve(prepared.data.eval_batches, cfg.evaluate_every, "stock")
    bar = [JobProgress(label="stock Trainer")] if cfg.progress else []
    trainer = make_trainer(cfg, prepared, str(Path(cfg.output_dir) / "compare-stock"), [*bar, curve], stock=True)
    with StopOnSignal() as stop:
        trainer.add_callback(stop)
        _train(trainer, bar)
    if stop.received is not None:
        raise KeyboardInterrupt
    return curve.curves


def _train_turbo(
    cfg: PretrainConfig,
    prepared: Prepared,
    console: Console,
    stock: Curves | None,
    deadline: float | None = None,
    started: float | None = None,
) -> PretrainResult:
    curve, finite = HeldOutCurve(prepared.data.eval_batches, cfg.evaluate_every, "turbotrain"), StopOnNonFinite()
    timer = [StopAtDeadline(deadline)] if deadline is not None else []
    clock = JobClock(started or time.perf_counter(), last_complete_checkpoint(cfg.output_dir) if cfg.resume else None)
    if clock.resumed_from is not None:
        console.print(resume_line(clock.resumed_from, clock.before))
    with StopOnSignal() as stop:
        bar = [JobProgress(lambda: _stopped_by(timer, stop))] if cfg.progress else []
        trainer = make_trainer(cfg, prepared, cfg.output_dir, [*bar, *timer, stop, finite, curve, clock])
        start = time.perf_counter()
        _train(trainer, bar, cfg.resume)
        seconds = time.perf_counter() - start - curve.paused_seconds
    output_dir = Path(cfg.output_dir)
    if finite.reason:
        raise TrainingStopped(
            f"training stopped at step {finite.step}: {finite.reason} (learning rate too high?); "
            f"nothing was saved after step {finite.step}; last good checkpoint: "
            f"{last_complete_checkpoint(output_dir) or 'none yet'}"
        )
    tokens = (
        (trainer.state.global_step - curve.start_step)
        * cfg.batch_size
        * prepared.data.train_tokens
        / len(prepared.data.train)
    )
    result = PretrainResult(
        output_dir,
        curve.curves.last,
        prepared.data.unigram_top1,
        prepared.data.unigram_top5,
        seconds,
        tokens / max(seconds, 1e-9),
        [],
        curve.curves,
        steps=trainer.state.global_step,
        planned_steps=cfg.steps if timer and timer[0].stopped_at is not None else None,
        part_steps=trainer.state.global_step - curve.start_step,
        resumed_seconds=clock.before,
        resumed_from=clock.resumed_from,
    )
    if stop.received is not None:
        result.stopped_by = stop.name
        console.print(
            f"{stop.name}: stopped at step {trainer.state.global_step} after saving "
            f"{last_complete_checkpoint(output_dir)}; continue with the same command and --resume"
        )
        return result
    _finish(cfg, prepared, trainer, result, stock, console, clock)
    return result


def _train(trainer, bar: list[JobProgress], resume: bool = False) -> None:
    """`trainer.train()`, without Trainer's missing-keys warning for the tied weights a checkpoint holds once
    (quiet.py); the bar taken down whatever happens."""
    try:
        with quiet_tied_missing_keys(trainer.model):
            trainer.train(resume_from_checkpoint=True if resume else None)
    finally:
        for each in bar:
            each.close()


def _stopped_by(timer: list[StopAtDeadline], stop: StopOnSignal) -> str | None:
    if timer and timer[0].stopped_at is not None:
        return "budget reached"
    return f"{stop.name} received" if stop.received is not None else None


def _finish(
    cfg, prepared: Prepared, trainer, result: PretrainResult, stock: Curves | None, console: Console, clock: JobClock
) -> None:
    trainer.save_model(str(result.output_dir))
    prepared.tokenizer.save_pretrained(str(result.output_dir))
    result.guesses = fill_mask(
        result.output_dir, choose_probes(prepared.data.held_out_paragraphs, prepared.tokenizer, cfg.seq_len)
    )
    if stock is not None:
        result.compare = time_to_quality(stock, result.curves)
        (result.output_dir / "compare.json").write_text(json.dumps(result.compare.as_dict(), indent=2))
    if cfg.plot and is_matplotlib_available():
        from turbotrain.pretrain.plot import plot_losses

        runs = {"stock Trainer": stock, "TurboTrainer": result.curves} if stock else {"TurboTrainer": result.curves}
        result.plot = plot_losses(
            runs, result.output_dir / "loss.png", result.compare.target_loss if result.compare else None
        )
    result.wall_seconds = clock.seconds()
    print_summary(console, result)
    console.print("MFU: " + _mfu_line(trainer, prepared, result))
    if cfg.export_onnx:
        export_for_deployment(console, result.output_dir)


def _mfu_line(trainer, prepared: Prepared, result: PretrainResult) -> str:
    """The run's achieved FLOP/s against this machine's measured matmul peak (measure/flops.py's formula).

    Attention is counted at the mean paragraph length; the head on the 15% masked rows when label
    sparsity ran, on every token otherwise."""
    from turbotrain.measure import flops

    tokens = int(result.tokens_per_second * result.train_seconds)
    mean_length = max(1, round(prepared.data.train_tokens / max(len(prepared.data.train), 1)))
    sparse = trainer.turbo_report is not None and "label_sparsity" in trainer.turbo_report.applied
    return flops.run_line(
        trainer.model,
        tokens=tokens,
        seq_len=mean_length,
        seconds=result.train_seconds,
        head_rows=int(MASKED_SHARE * tokens) if sparse else None,
    )


def export_for_deployment(console: Console, model_dir: Path) -> Path:
    """`--export-onnx`: the saved model and tokenizer -> verified ONNX in `<output_dir>/onnx`."""
    from turbotrain.export.command import run_export

    onnx_dir = model_dir / "onnx"  # this run's own: an earlier export there (--overwrite, --resume) is replaced
    if run_export(str(model_dir), str(onnx_dir), console=console, overwrite=True) != 0:
        raise RuntimeError(f"the ONNX export in {onnx_dir} does not match torch; see the message above")
    return onnx_dir
