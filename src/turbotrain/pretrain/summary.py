"""What the main job prints: the data and baseline before training, the results after."""

from __future__ import annotations

import math

from rich.console import Console

from turbotrain.pretrain.precision import resolve_precision


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
    minutes, seconds = divmod(round(result.wall_seconds), 60)
    cut = f" (of {result.planned_steps:,} planned: the time budget ran out first)" if result.planned_steps else ""
    console.print(f"[bold]{result.steps:,} steps{cut} in {minutes} min {seconds:02d} s[/] (the whole job so far)")
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
