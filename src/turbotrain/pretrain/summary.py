"""What the main job prints: the data and baseline before training, the results after.

After a resume the time is the whole job's: the earlier parts up to the checkpoint it resumed from (kept in the
checkpoint, callbacks.JobClock) plus this part. A run whose held-out top-1 stays near the unigram baseline (below
`NEAR_UNIGRAM` times it) learned word frequencies only; its fill-mask guesses are then the commonest tokens
('.', 'the', ','), and one line says so, with the budget that measured better: the default model (h128 x 2,
batch 32) on the 2-core EPYC of docs/pretrain.md left that plateau after ~700 steps (716 steps: top-1 2.2x the
unigram's, benchmarks/2026-12-01) and reached top-1 16.9% with guesses that change with the sentence after
4,466 (the default 10 minutes there). The minutes are the job's own sizing (budget.py) of 4,466 steps at this
run's seconds per step, plus this run's time outside training: an estimate for this machine, not a measurement.
"""

from __future__ import annotations

import math

from rich.console import Console

from turbotrain.pretrain.budget import SAFETY
from turbotrain.pretrain.precision import resolve_precision

NEAR_UNIGRAM = 1.5
GOOD_STEPS = 4_466  # the EPYC's default 10 minutes: top-1 16.9% (docs/pretrain.md)


def print_data(console: Console, cfg, prepared) -> None:
    data = prepared.data
    console.print(
        f"corpus [bold]{prepared.corpus.name}[/]: {len(prepared.corpus):,} paragraphs, "
        f"{prepared.corpus.num_chars / 1e6:.2f} M chars; tokenizer: {len(prepared.tokenizer):,} tokens"
    )
    console.print(
        f"data: {len(data.train):,} training paragraphs ({data.train_tokens / 1e6:.2f} M tokens, "
        f"<= {cfg.seq_len} each), {len(data.held_out_paragraphs):,} held out "
        f"({data.eval_masked_tokens:,} masked tokens, fixed masks)"
    )
    console.print(
        f"model: RoBERTa h{cfg.hidden_size} L{cfg.num_layers} heads {cfg.num_heads}; {cfg.steps:,} steps "
        f"of {cfg.batch_size} paragraphs, lr {cfg.lr:g} ({cfg.lr_scheduler}, "
        f"{cfg.warmup} warm-up); {resolve_precision(cfg.bf16).label}"
    )


def print_summary(console: Console, result) -> None:
    held = result.held_out
    cut = f" (of {result.planned_steps:,} planned: the time budget ran out first)" if result.planned_steps else ""
    parts = ""
    if result.resumed_from is not None:
        earlier, now = _clock(result.resumed_seconds), _clock(result.wall_seconds - result.resumed_seconds)
        parts = f": {earlier} up to {result.resumed_from}, {now} resumed"
    console.print(
        f"[bold]{result.steps:,} steps{cut} in {_clock(result.wall_seconds)}[/] (the whole job so far{parts})"
    )
    if held is not None:
        console.print(
            f"held-out: loss {held.loss:.3f} (perplexity {math.exp(min(held.loss, 50)):.1f}), masked-token "
            f"top-1 {held.top1:.1%} / top-5 {held.top5:.1%}; unigram baseline top-1 {result.unigram_top1:.1%} / "
            f"top-5 {result.unigram_top5:.1%} (top-1 {held.top1 / max(result.unigram_top1, 1e-9):.1f}x)"
        )
    console.print(
        f"trained in {result.train_seconds:.0f} s ({result.tokens_per_second:,.0f} real tokens/s, evaluation "
        f"and checkpoint saves excluded); saved to {result.output_dir}"
    )
    if result.compare is not None:
        c = result.compare
        console.print(
            f"time to held-out loss {c.target_loss:.3f}: stock Trainer {c.stock_seconds:.0f} s (step "
            f"{c.stock_step}), TurboTrainer {c.turbo_seconds:.0f} s (step {c.turbo_step}): "
            f"[bold]{c.speedup:.2f}x[/]"
        )
    if result.plot is not None:
        console.print(f"loss curves: {result.plot}")
    console.print("fill-mask on held-out sentences (true word, its rank among all tokens; guesses):")
    for guess in result.guesses:
        shown = ", ".join(f"{token!r} {score:.0%}" for token, score in guess.top)
        console.print(f"  {guess.probe.text}  [{guess.probe.word!r} rank {guess.rank}]  ->  {shown}")
    plateau = plateau_line(result)
    if plateau is not None:
        console.print(plateau)


def resume_line(checkpoint: str, seconds: float) -> str:
    return f"resuming from {checkpoint} ({_clock(seconds)} of the job before it)"


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds:02d} s"


def plateau_line(result) -> str | None:
    """One line when held-out top-1 is near the unigram baseline's (module docstring), else None."""
    held = result.held_out
    if held is None or result.part_steps < 1 or held.top1 >= NEAR_UNIGRAM * result.unigram_top1:
        return None
    step_seconds = result.train_seconds / result.part_steps
    outside = max(result.wall_seconds - result.resumed_seconds - result.train_seconds, 0.0)
    minutes = math.ceil((outside + GOOD_STEPS * step_seconds / SAFETY) / 60)
    return (
        f"top-1 {held.top1:.1%} is near the unigram baseline's {result.unigram_top1:.1%}: in {result.steps:,} steps "
        "the model learned word frequencies only, so its guesses are the commonest tokens, as expected of so short "
        "a run. The default model left this plateau after ~700 steps and reached top-1 16.9% after 4,466 on a "
        f"2-core EPYC (docs/pretrain.md); at this run's {step_seconds:.3f} s/step that is about --minutes {minutes} "
        f"here (or --steps {GOOD_STEPS})."
    )
