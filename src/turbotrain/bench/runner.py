"""Interleaved runs: for each round, every peer trains `warmup + steps` steps from the same initial
weights on the same batches (A B C A B C ...). Per peer it reports:

* tokens/s: median over every measured step of every round (warm-up steps excluded) of the step's
  real tokens (padding not counted) over its wall time, a step being one optimizer step end to end
  (data loading, collation, forward, backward, optimizer, logging). Every peer gets the same batches;
* padding share: the share of stock's padded batch that is padding, over the measured steps;
* ratio: that median over the stock peer's;
* first step: seconds of the first step of round 1 (compilation lands here), reported apart;
* peak memory: the largest segment peak over the rounds (see memory.py);
* loss difference: the largest |loss - stock loss| over all steps and rounds, absolute and relative;
* GFLOP/s and MFU: median over the measured steps of the step's FLOPs on the work that peer executed
  (bench/flops.py: its formula; with label sparsity the head counts only labelled rows, with packing
  only real tokens) over its wall time, and that as a share of the matmul peak measured for the run's
  dtype (bf16 with --bf16, else fp32) at the start of the run (bench/peak.py).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

import torch
from rich.console import Console
from rich.progress import Progress

from turbotrain.bench.peers import CountingCollator, build_trainer, timed_train
from turbotrain.bench.report import environment, write_reports
from turbotrain.bench.workload import Workload
from turbotrain.data.variable import length_histogram
from turbotrain.measure.flops import ModelFlops, StepWork, step_flops
from turbotrain.measure.memory import PeakMemory
from turbotrain.measure.peak import matmul_peak


@dataclass
class PeerRuns:
    name: str
    step_seconds: list[list[float]] = field(default_factory=list)
    step_tokens: list[list[int]] = field(default_factory=list)
    step_padded: list[list[int]] = field(default_factory=list)
    losses: list[list[float]] = field(default_factory=list)
    peaks_mb: list[float] = field(default_factory=list)
    backend: str = ""
    passes: list[str] = field(default_factory=list)
    backend_reports: list[dict] = field(default_factory=list)
    step_work: list[list[StepWork]] = field(default_factory=list)

    def throughputs(self, warmup: int) -> list[float]:
        """Real tokens per second of every measured step."""
        return [
            t / s
            for seconds, tokens in zip(self.step_seconds, self.step_tokens)
            for s, t in list(zip(seconds, tokens))[warmup:]
        ]

    def flops_per_s(self, warmup: int, model: ModelFlops) -> list[float]:
        """Achieved FLOP/s of every measured step (bench/flops.py)."""
        return [
            step_flops(model, w) / s
            for seconds, work in zip(self.step_seconds, self.step_work)
            for s, w in list(zip(seconds, work))[warmup:]
        ]

    def padding_share(self, warmup: int) -> float:
        real = sum(t for tokens in self.step_tokens for t in tokens[warmup:])
        padded = sum(p for padded in self.step_padded for p in padded[warmup:])
        return 1 - real / padded if padded else 0.0


def interleaved_order(peers: tuple[str, ...], rounds: int) -> list[tuple[int, str]]:
    """(round, peer) in the order they run: A B C A B C ..."""
    return [(r, peer) for r in range(rounds) for peer in peers]


def run_segment(peer: str, workload: Workload, model, data, runs: PeerRuns, memory: PeakMemory) -> None:
    collator = CountingCollator(data.collator, causal=workload.task == "clm")
    trainer, seconds, peak = timed_train(lambda tmp: build_trainer(peer, workload, model, data, collator, tmp), memory)
    runs.step_seconds.append(seconds)
    steps = len(runs.step_seconds[-1])
    runs.step_tokens.append(collator.real[:steps])
    runs.step_padded.append(collator.padded[:steps])
    runs.losses.append([e["loss"] for e in trainer.state.log_history if "loss" in e])
    if peak is not None:
        runs.peaks_mb.append(peak)
    backend = getattr(trainer, "backend", None)
    runs.backend = getattr(backend, "name", "")
    if backend is not None and backend.report():
        runs.backend_reports.append(backend.report())
        if "choice" in backend.report():  # a backend that chooses (auto) names what it ran
            runs.backend += f": {backend.report()['choice']}"
    report = getattr(trainer, "turbo_report", None)
    runs.passes = report.applied if report is not None else []
    executed = ("padding_free" in runs.passes, "label_sparsity" in runs.passes)
    runs.step_work.append([work[executed] for work in collator.work[:steps]])


def loss_difference(runs: PeerRuns, stock: PeerRuns) -> tuple[float, float]:
    """Largest absolute and relative difference from the stock losses, step by step."""
    pairs = [(a, b) for mine, ref in zip(runs.losses, stock.losses) for a, b in zip(mine, ref)]
    if not pairs:
        return float("nan"), float("nan")
    return max(abs(a - b) for a, b in pairs), max(abs(a - b) / abs(b) for a, b in pairs)


def summarize(
    workload: Workload,
    runs: dict[str, PeerRuns],
    memory_kind: str,
    model: ModelFlops | None = None,
    peak: dict | None = None,
) -> dict:
    stock = runs.get("stock")
    rows = {}
    for name, peer in runs.items():
        flops = peer.flops_per_s(workload.warmup, model) if model is not None and peer.step_work else []
        achieved = statistics.median(flops) if flops else None
        row = {
            "gflops_per_s": achieved / 1e9 if achieved is not None else None,
            "mfu": achieved / peak["flops_per_s"] if achieved is not None and peak else None,
            "tokens_per_s": statistics.median(peer.throughputs(workload.warmup)),
            "median_step_s": statistics.median(s for seconds in peer.step_seconds for s in seconds[workload.warmup :]),
            "first_step_s": peer.step_seconds[0][0],
            "peak_memory_mb": max(peer.peaks_mb) if peer.peaks_mb else None,
            "final_loss": peer.losses[0][-1] if peer.losses and peer.losses[0] else None,
            "backend": peer.backend or ("inductor" if name == "compiled" else "eager"),
            "passes": peer.passes,
        }
        if peer.backend_reports:
            row["backend_report"] = peer.backend_reports[-1]  # cumulative over the rounds so far
        if stock is not None:
            row["max_abs_loss_diff"], row["max_rel_loss_diff"] = loss_difference(peer, stock)
        rows[name] = row
    if stock is not None:
        for row in rows.values():
            row["ratio_to_stock"] = row["tokens_per_s"] / rows["stock"]["tokens_per_s"]
    result = {
        "workload": workload.describe(),
        "command": workload.command(),
        "memory_kind": memory_kind,
        "environment": environment(),
        "peers": rows,
    }
    if peak is not None:
        result["matmul_peak"] = peak
    if stock is not None:
        result["padding_share"] = stock.padding_share(workload.warmup)
    return result


def run_bench(workload: Workload, out_dir: str = "bench-out", console: Console | None = None) -> dict:
    console = console or Console(width=140)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with console.status("Preparing data and the initial model, measuring the matmul peak..."):
        data = workload.data()
        model = workload.initial_model()
        peak = asdict(matmul_peak(torch.bfloat16 if workload.bf16 else torch.float32, device))
    runs = {peer: PeerRuns(peer) for peer in workload.peers}
    memory = PeakMemory(device)
    order = interleaved_order(workload.peers, workload.rounds)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("benchmark", total=len(order))
        for round_index, peer in order:
            progress.update(task, description=f"round {round_index + 1}/{workload.rounds}: {peer}")
            run_segment(peer, workload, model, data, runs[peer], memory)
            progress.advance(task)
    result = summarize(workload, runs, memory.kind, ModelFlops.of(model), peak)
    if workload.lengths == "variable":
        result["length_histogram"] = length_histogram([len(ids) for ids in data.train["input_ids"]])
    paths = write_reports(result, out_dir, console)
    result["files"] = [str(p) for p in paths]
    return result
