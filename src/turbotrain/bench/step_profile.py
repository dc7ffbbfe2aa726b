"""Where a dense step's time goes: top ops by self time per step (torch.profiler), for the bench workload.

    python -m turbotrain.bench.step_profile --task clm --vocab-size 50257 [--bf16] [--stock] [--steps 3]

Builds the bench's model and batches, installs turbotrain's passes (unless --stock), and runs
forward + backward + fused AdamW (under bf16 autocast with --bf16) for 2 warm-up steps and `--steps`
profiled ones; prints the median step time and the top ops by self CPU time, in ms per step and as a
share of the step.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from turbotrain.bench.workloads.corpus_lm import CorpusLM
from turbotrain.passes.fused_optimizer import fused_adamw
from turbotrain.passes.optimize import optimize


def batches(workload: CorpusLM, count: int) -> list[dict]:
    data = workload.data()
    rows = [data.train[i] for i in range(count * workload.batch_size)]
    return [data.collator(rows[i : i + workload.batch_size]) for i in range(0, len(rows), workload.batch_size)]


def run(workload: CorpusLM, stock: bool, steps: int, top: int) -> None:
    model = workload.model().train()
    if not stock:
        optimize(model)
    optimizer = fused_adamw(model.parameters(), lr=1e-4)
    work = batches(workload, steps + 2)
    autocast = torch.autocast("cpu", torch.bfloat16, enabled=workload.bf16)

    def step(batch):
        with autocast:
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for batch in work[:2]:
        step(batch)
    seconds = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in work[2:]:
            start = time.perf_counter()
            step(batch)
            seconds.append(time.perf_counter() - start)
    step_ms = statistics.median(seconds) * 1e3
    print(
        f"median step {step_ms:.0f} ms (profiled, {steps} steps; {'stock' if stock else 'turbotrain passes'}, "
        f"{'bf16 autocast' if workload.bf16 else 'fp32'}), threads {torch.get_num_threads()}"
    )
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    print("| op | self ms / step | share of step | calls / step |\n|---|---|---|---|")
    for event in events:
        ms = event.self_cpu_time_total / 1e3 / steps
        print(f"| {event.key} | {ms:.1f} | {ms / step_ms:.0%} | {event.count / steps:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="clm", choices=["mlm", "clm"])
    parser.add_argument("--vocab-size", type=int, default=50257)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--stock", action="store_true", help="no turbotrain passes")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)
    ns = parser.parse_args()
    run(CorpusLM(task=ns.task, vocab_size=ns.vocab_size, bf16=ns.bf16), ns.stock, ns.steps, ns.top)


if __name__ == "__main__":
    main()
