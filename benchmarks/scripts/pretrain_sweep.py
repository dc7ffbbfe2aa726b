"""Rank main-job configurations at an equal wall-clock training budget (the sweep behind the defaults).

First every config runs a 12-step probe in turn (A B C ...; the first 3 steps untimed) to measure seconds
per step; then each trains `budget / step_time` steps (linear decay to
that step, so every config finishes its schedule) and reports held-out loss and masked top-1/top-5
against the unigram baseline, and the fill-mask lines of the trained model (with how many distinct top-1
guesses they make). `--steps N` gives every config N steps instead. Configs ending in "b" train with bf16
autocast (`--bf16 on`); all others in fp32. Usage (from the repository root; on a CPU other jobs share, one
thread avoids OpenMP barrier stalls: see the 2026-12-01 benchmark file):

    OMP_NUM_THREADS=1 PYTHONPATH=src flock /tmp/turbotrain-cpu.lock \
        python benchmarks/scripts/pretrain_sweep.py --budget 75 --configs A B C E J

Per-config mode, so that each long run holds the CPU lock on its own (2026-12-02 file): `--probe-only` measures
step times and exits; `--s-per-step S` skips the probe and trains the one config named in `--configs`:

    PYTHONPATH=src flock /tmp/turbotrain-cpu.lock python benchmarks/scripts/pretrain_sweep.py --probe-only \
        --configs B Ab Fb
    PYTHONPATH=src flock /tmp/turbotrain-cpu.lock python benchmarks/scripts/pretrain_sweep.py --budget 600 \
        --configs Ab --s-per-step 0.2
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

from turbotrain.pretrain.callbacks import HeldOutCurve
from turbotrain.pretrain.config import PretrainConfig
from turbotrain.pretrain.fill_mask_probes import choose_probes, fill_mask
from turbotrain.pretrain.setup import make_trainer, prepare

BASE = dict(progress=False, plot=False, logging_steps=50, save_steps=10**6, bf16="off")
CONFIGS = {
    "A": dict(
        hidden_size=256, num_layers=4, num_heads=4, seq_len=128, batch_size=32, vocab_size=8000, learning_rate=1e-3
    ),
    "B": dict(
        hidden_size=128, num_layers=2, num_heads=2, seq_len=128, batch_size=32, vocab_size=8000, learning_rate=2e-3
    ),
    "C": dict(
        hidden_size=256, num_layers=4, num_heads=4, seq_len=128, batch_size=32, vocab_size=8000, learning_rate=2e-3
    ),
    "D": dict(
        hidden_size=256, num_layers=4, num_heads=4, seq_len=128, batch_size=32, vocab_size=4000, learning_rate=1e-3
    ),
    "E": dict(
        hidden_size=256,
        num_layers=4,
        num_heads=4,
        seq_len=128,
        batch_size=32,
        vocab_size=8000,
        learning_rate=1e-3,
        dropout=0.0,
    ),
    "F": dict(
        hidden_size=384, num_layers=4, num_heads=6, seq_len=128, batch_size=32, vocab_size=8000, learning_rate=1e-3
    ),
    "G": dict(
        hidden_size=256, num_layers=4, num_heads=4, seq_len=128, batch_size=16, vocab_size=8000, learning_rate=1e-3
    ),
    "H": dict(
        hidden_size=256, num_layers=6, num_heads=4, seq_len=128, batch_size=32, vocab_size=8000, learning_rate=1e-3
    ),
    "B1": dict(
        hidden_size=128, num_layers=2, num_heads=2, seq_len=128, batch_size=32, vocab_size=8000, learning_rate=1e-3
    ),
    "J": dict(
        hidden_size=192, num_layers=3, num_heads=3, seq_len=128, batch_size=32, vocab_size=8000, learning_rate=2e-3
    ),
    "I": dict(
        hidden_size=256, num_layers=4, num_heads=4, seq_len=64, batch_size=32, vocab_size=8000, learning_rate=1e-3
    ),
}
BF16 = dict(bf16="on")
CONFIGS.update(
    {
        "Bb": {**CONFIGS["B"], **BF16},
        "Ab": {**CONFIGS["A"], **BF16},
        "Eb": {**CONFIGS["E"], **BF16},
        "Hb": {**CONFIGS["H"], **BF16},
        "Fb": {**CONFIGS["F"], **BF16},
        "Kb": dict(
            hidden_size=384, num_layers=6, num_heads=6, seq_len=128, batch_size=32, vocab_size=8000, learning_rate=7e-4
        )
        | BF16,
        "Lb": dict(
            hidden_size=512, num_layers=4, num_heads=8, seq_len=128, batch_size=32, vocab_size=8000, learning_rate=5e-4
        )
        | BF16,
    }
)


def step_seconds(cfg: PretrainConfig, prepared, steps: int = 12) -> float:
    cfg = replace(cfg, max_steps=steps, warmup_steps=0)
    times = []
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **k):
            times.append(time.perf_counter())

    make_trainer(cfg, prepared, "/tmp/sweep-probe", [Clock()]).train()
    return (times[-1] - times[2]) / (len(times) - 3)


_PREPARED: dict = {}


def prepared_for(cfg: PretrainConfig):
    key = (cfg.vocab_size, cfg.seq_len, cfg.batch_size)
    if key not in _PREPARED:
        _PREPARED[key] = prepare(cfg)
    return _PREPARED[key]


def probe_all(names: list[str], rounds: int = 2) -> dict[str, float]:
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name in names:
            cfg = PretrainConfig(**{**BASE, **CONFIGS[name]})
            seconds = step_seconds(cfg, prepared_for(cfg))
            best[name] = min(seconds, best.get(name, seconds))
    return best


def run(name: str, budget: float, per_step: float) -> dict:
    cfg = PretrainConfig(**{**BASE, **CONFIGS[name]})
    prepared = prepared_for(cfg)
    steps = max(20, int(budget / per_step))
    cfg = replace(cfg, max_steps=steps, warmup_steps=max(1, steps // 20))
    curve = HeldOutCurve(prepared.data.eval_batches, every=max(1, steps // 4))
    trainer = make_trainer(cfg, prepared, f"/tmp/sweep-{name}", [curve])
    trainer.train()
    last = curve.curves.last
    guesses = probe_lines(trainer, prepared, f"/tmp/sweep-{name}/model", cfg.seq_len)
    return dict(
        config=name,
        **CONFIGS[name],
        steps=steps,
        s_per_step=round(per_step, 3),
        train_s=round(curve.curves.held_out[-1].seconds, 1),
        held_out_loss=round(last.loss, 3),
        curve=[(p.step, round(p.value, 3)) for p in curve.curves.held_out],
        top1=round(last.top1, 4),
        top5=round(last.top5, 4),
        unigram_top1=round(prepared.data.unigram_top1, 4),
        unigram_top5=round(prepared.data.unigram_top5, 4),
        distinct_top1=len({line.split("->")[1].split("'")[1] for line in guesses}),
        fill_mask=guesses,
    )


def probe_lines(trainer, prepared, model_dir: str, seq_len: int) -> list[str]:
    """The main job's fill-mask lines (probes.py) for the trained model, as the job prints them."""
    trainer.save_model(model_dir)
    prepared.tokenizer.save_pretrained(model_dir)
    probes = choose_probes(prepared.data.held_out_paragraphs, prepared.tokenizer, seq_len)
    return [
        f"{g.probe.text}  [{g.probe.word!r} rank {g.rank}]  ->  " + ", ".join(f"{t!r} {p:.0%}" for t, p in g.top)
        for g in fill_mask(model_dir, probes)
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=150)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument(
        "--steps", type=int, default=0, help="equal steps (tokens) for every config instead of a wall budget"
    )
    parser.add_argument("--out", default="/tmp/sweep.jsonl")
    parser.add_argument("--probe-only", action="store_true", help="measure seconds per step and stop")
    parser.add_argument("--s-per-step", type=float, default=0.0, help="a probe's measured step time (skips probing)")
    ns = parser.parse_args()
    if ns.s_per_step:
        per_step = {name: ns.s_per_step for name in ns.configs}
    else:
        per_step = probe_all(ns.configs, rounds=1)
        print(json.dumps({"probe_s_per_step": per_step}), flush=True)
    if ns.probe_only:
        return
    for name in ns.configs:  # a shared, overloaded CPU makes wall budgets meaningless: --steps gives equal steps
        row = run(name, float(ns.steps) if ns.steps else ns.budget, 1.0 if ns.steps else per_step[name])
        row["s_per_step"] = round(per_step[name], 3)
        print(json.dumps(row), flush=True)
        with open(ns.out, "a") as handle:
            handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
