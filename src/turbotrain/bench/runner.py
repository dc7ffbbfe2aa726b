"""The one interleaved runner of every workload (workload.py): for each round, every peer trains
`warmup + steps` steps from the same initial weights on the same batches (A B C A B C ...). Per peer:

* throughput: the units of every measured step of every round (warm-up steps excluded) over their wall
  time, a step being one optimizer step end to end (data loading, collation, forward, backward,
  optimizer, logging). The units are the workload's (`unit`): real tokens (padding not counted), label
  tokens, or examples; every peer gets the same batches. `tokens_per_s`, `label_tokens_per_s` and
  `examples_per_s` are reported where the batches have them;
* ratio: the reference peer's seconds over this peer's, summed over the measured steps both ran (same round,
  same batch): the same statistic as the throughput columns, so the two always agree (steadiness.py); beside
  it the ratio of each round, each peer's fastest and slowest measured step, and (in the JSON) the median of
  the per-step ratios (`paired_median_ratio`, the ratio this bench showed before 2026-12-05);
* steadiness (steadiness.py): other processes' CPU time during the run and stalls (a step repeated across rounds
  far slower than its fastest repeat); a disturbed run says why in one warning line and its ratios are marked
  unreliable;
* work ratio, where the workload counts work: the same paired median of the reference's executed FLOPs over
  this peer's (measure/flops.py): the speed-up the work a peer removes explains alone, at equal efficiency
  (a ratio above it means the peer also runs its work faster, below it slower);
* `step_s`: every measured step's seconds, round by round (in the JSON);
* median step seconds, and the first step of round 1 apart (compilation and export land there);
* with `--isolate`, each segment in a process of its own (isolated.py), in the same interleaved order;
* peak memory: the largest segment peak over the rounds (measure/memory.py), with that segment's growth
  split into weights, gradients, optimizer state, logits and the rest (activations); and the memory held when
  training began (`memory_at_start_mb`, the median over the rounds: after the trainer was built and its
  passes self-checked, before the first step), where the peer's record has it;
* loss difference: the largest |loss - reference loss| over all steps and rounds, absolute and relative; where
  peers make their own batches (GRPO's completions) and record them (`PeerRecord.batch_keys`), only over the
  steps whose batch equals the reference's (`unequal_batches`: how many steps were left out);
* a part timed apart (the workload's `apart`, GRPO's generation): its median seconds per measured step and
  every measured step's (`apart_median_s`, `apart_step_s`); it is not in the step seconds, so the ratio and
  the throughput are of the rest of the step;
* GFLOP/s and MFU, where the workload counts work: the median over the measured steps of the step's
  FLOPs on the work that peer executed (measure/flops.py: with label sparsity the head counts only
  labelled rows, with packing only real tokens) over its wall time, and that as a share of the matmul
  peak measured for the run's dtype (bf16 with --bf16, else fp32) at the start of the run (measure/peak.py).
And for the run: the padding share of the reference peer's batches (token slots, or label slots for a
label-token workload), and the workload's extras (a length histogram, the head's share of the step).
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import asdict, dataclass, field

import torch
from rich.console import Console
from rich.progress import Progress

from turbotrain.bench.counting import BatchCount, BatchCounter
from turbotrain.bench.initial_model import ModelFile, SpilledModel
from turbotrain.bench.isolated import call_in_process
from turbotrain.bench.report import BENCH_RUN, environment, write_reports
from turbotrain.bench.steadiness import disturbances, round_ratios, step_spread, total_ratio
from turbotrain.bench.workload import UNIT_KEYS, Workload
from turbotrain.measure.flops import ModelFlops, step_flops
from turbotrain.measure.memory import MemorySplit, PeakMemory, split_growth
from turbotrain.measure.peak import matmul_peak
from turbotrain.utils.threads import OtherWork, usable_cores


@dataclass
class Segment:
    """One peer's `warmup + steps` steps of one round."""

    seconds: list[float]
    losses: list[float]
    counts: list[BatchCount]  # one per step
    executed: tuple[bool, bool]  # the work the peer ran: (packed, sparse head)
    peak_mb: float | None = None
    split: MemorySplit | None = None
    start_mb: float | None = None  # held when training began (before the first step)
    apart_seconds: list[float] | None = None  # a part of every step timed apart (PeerRecord.apart_seconds)
    batch_keys: list[str] | None = None  # every step's batch as a digest, where the peer makes its own


@dataclass
class PeerRuns:
    name: str
    segments: list[Segment] = field(default_factory=list)
    backend: str = ""
    passes: list[str] = field(default_factory=list)
    backend_report: dict = field(default_factory=dict)

    def measured(self, warmup: int) -> list[tuple[float, BatchCount, tuple[bool, bool]]]:
        """(seconds, batch count, executed work) of every measured step of every round."""
        return [
            (seconds, count, segment.executed)
            for segment in self.segments
            for seconds, count in list(zip(segment.seconds, segment.counts))[warmup:]
        ]

    def throughput(self, warmup: int, unit: str) -> float:
        """The measured steps' units over their seconds (0 where the batches have none of that unit)."""
        measured = self.measured(warmup)
        seconds = sum(seconds for seconds, _, _ in measured)
        return sum(count.units(unit) for _, count, _ in measured) / seconds if seconds else 0.0

    def step_seconds(self, warmup: int) -> list[float]:
        return [seconds for seconds, _, _ in self.measured(warmup)]

    def flops_per_s(self, warmup: int, model: ModelFlops) -> list[float]:
        """Achieved FLOP/s of every measured step on the work the peer executed (measure/flops.py)."""
        return [
            step_flops(model, count.work[executed]) / seconds
            for seconds, count, executed in self.measured(warmup)
            if count.work
        ]

    def padding_share(self, warmup: int, unit: str) -> float | None:
        counts = [count for _, count, _ in self.measured(warmup)]
        if unit == "label tokens":
            real, slots = sum(c.label_tokens for c in counts), sum(c.label_slots for c in counts)
        else:
            real, slots = sum(c.tokens for c in counts), sum(c.slots for c in counts)
        return 1 - real / slots if slots else None

    @property
    def losses(self) -> list[list[float]]:
        return [segment.losses for segment in self.segments]

    @property
    def round_seconds(self) -> list[list[float]]:
        """Every round's step seconds, warm-up steps included."""
        return [segment.seconds for segment in self.segments]


def interleaved_order(peers: tuple[str, ...], rounds: int) -> list[tuple[int, str]]:
    """(round, peer) in the order they run: A B C A B C ..."""
    return [(r, peer) for r in range(rounds) for peer in peers]


def run_segment(workload: Workload, peer: str, model, data, runs: PeerRuns, memory: PeakMemory) -> None:
    counter = BatchCounter(step_work=workload.step_work)
    with tempfile.TemporaryDirectory() as scratch:
        memory.release_freed()
        held = memory.current_mb()
        run = workload.trainer(peer, model, data, counter, scratch)
        memory.reset()
        record = run.train()
        peak = memory.peak_mb()
    steps = len(record.seconds)
    executed = ("padding_free" in record.passes, "label_sparsity" in record.passes)
    segment = Segment(record.seconds, record.losses, counter.counts[:steps], executed, peak)
    segment.start_mb = getattr(record, "resident_at_start_mb", None)
    segment.apart_seconds, segment.batch_keys = record.apart_seconds, record.batch_keys
    if peak is not None and held is not None and record.model is not None:
        segment.split = split_growth(peak - held, record.model, record.optimizer, record.logits_bytes)
    runs.segments.append(segment)
    runs.backend, runs.passes = record.backend, record.passes
    if record.backend_report:
        runs.backend_report = record.backend_report  # cumulative over the rounds so far


def run_segment_isolated(workload: Workload, peer: str, initial: ModelFile, data, device, round_index: int):
    """`peer`'s segment in a process of its own (isolated.py): a `PeerRuns` of that one segment, as the child
    measured it (its own peak and start memory; the backend report of that round alone)."""
    where = f"the '{peer}' peer's segment (round {round_index + 1}) in a process of its own"
    return call_in_process(_segment_in_child, workload, peer, initial, data, device, where=where)


def _segment_in_child(workload: Workload, peer: str, initial: ModelFile, data, device) -> PeerRuns:
    runs = PeerRuns(peer)
    run_segment(workload, peer, initial, data, runs, PeakMemory(device))
    return runs


def add_isolated(runs: PeerRuns, isolated: PeerRuns) -> None:
    """Add a segment run in a process of its own to its peer's runs."""
    runs.segments += isolated.segments
    runs.backend, runs.passes = isolated.backend, isolated.passes
    if isolated.backend_report:
        runs.backend_report = isolated.backend_report  # that round's alone: a child sees no earlier round


def step_pairs(runs: PeerRuns, reference: PeerRuns) -> tuple[list[tuple[float, float]], int]:
    """(this peer's loss, the reference's) of every step whose batch equals the reference's (every step where
    the batches are not recorded), and how many steps were left out for an unequal batch."""
    pairs, unequal = [], 0
    for own, theirs in zip(runs.segments, reference.segments):
        keys = zip(own.batch_keys or [None] * len(own.losses), theirs.batch_keys or [None] * len(theirs.losses))
        for a, b, (mine, ref) in zip(own.losses, theirs.losses, keys):
            if mine != ref:
                unequal += 1
            else:
                pairs.append((a, b))
    return pairs, unequal


def loss_difference(runs: PeerRuns, reference: PeerRuns) -> tuple[float, float]:
    """Largest absolute and relative difference from the reference's losses, step by step (equal batches only)."""
    pairs, _ = step_pairs(runs, reference)
    if not pairs:
        return float("nan"), float("nan")
    relative = (abs(a - b) / abs(b) if b else (0.0 if a == b else float("inf")) for a, b in pairs)
    return max(abs(a - b) for a, b in pairs), max(relative)


def peer_row(workload: Workload, peer: PeerRuns, model: ModelFlops | None, peak: dict | None) -> dict:
    warmup = workload.warmup
    flops = peer.flops_per_s(warmup, model) if model is not None else []
    achieved = statistics.median(flops) if flops else None
    measured = [seconds for seconds, _, _ in peer.measured(warmup)]
    highest = max((s for s in peer.segments if s.peak_mb is not None), key=lambda s: s.peak_mb, default=None)
    row = {
        "backend": peer.backend,
        "passes": peer.passes,
        "median_step_s": statistics.median(measured),
        "first_step_s": peer.segments[0].seconds[0],
        "gflops_per_s": achieved / 1e9 if achieved is not None else None,
        "mfu": achieved / peak["flops_per_s"] if achieved is not None and peak else None,
        "peak_memory_mb": highest.peak_mb if highest is not None else None,
        "memory_at_start_mb": _median_or_none([s.start_mb for s in peer.segments if s.start_mb is not None]),
        "memory_split_mb": asdict(highest.split) if highest is not None and highest.split is not None else None,
        "final_loss": peer.losses[0][-1] if peer.losses and peer.losses[0] else None,
    }
    for unit, key in UNIT_KEYS.items():
        rate = peer.throughput(warmup, unit)
        if rate:
            row[key] = rate
    row["step_s"] = [round(seconds, 4) for seconds in measured]
    row["step_s_min"], row["step_s_max"] = step_spread(peer.round_seconds, warmup) or (None, None)
    apart = [s for segment in peer.segments for s in (segment.apart_seconds or [])[warmup:]]
    if apart:
        row["apart_median_s"], row["apart_step_s"] = statistics.median(apart), [round(s, 4) for s in apart]
    if peer.backend_report:
        row["backend_report"] = peer.backend_report
    return row


def _median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def paired_work_ratio(runs: PeerRuns, reference: PeerRuns, warmup: int, model: ModelFlops) -> float | None:
    """Median over the measured steps of the reference's executed FLOPs over this peer's on the same batch: the
    speed-up that the work a peer removes explains alone, at the reference's efficiency (None: no work counted)."""
    ratios = [
        step_flops(model, ref.work[theirs.executed]) / step_flops(model, mine.work[own.executed])
        for own, theirs in zip(runs.segments, reference.segments)
        for ref, mine in zip(theirs.counts[warmup:], own.counts[warmup:])
        if ref.work and mine.work
    ]
    return statistics.median(ratios) if ratios else None


def paired_speedup(runs: PeerRuns, reference: PeerRuns, warmup: int) -> float:
    """Median over the measured steps of reference seconds / this peer's seconds on the same step (same round,
    same step index: the same batch); rounds of unequal length pair only their common steps."""
    ratios = [
        ref / mine
        for own, theirs in zip(runs.segments, reference.segments)
        for ref, mine in zip(theirs.seconds[warmup:], own.seconds[warmup:])
    ]
    return statistics.median(ratios) if ratios else float("nan")


def summarize(
    workload: Workload,
    runs: dict[str, PeerRuns],
    memory_kind: str,
    model=None,
    peak=None,
    other_cores: float | None = None,
) -> dict:
    """The run's result; `other_cores`: other processes' average busy cores during it (None: not measured)."""
    reference = runs.get(workload.reference)
    rows = {name: peer_row(workload, peer, model, peak) for name, peer in runs.items()}
    warmup = workload.warmup
    if reference is not None:
        for name, row in rows.items():
            row["max_abs_loss_diff"], row["max_rel_loss_diff"] = loss_difference(runs[name], reference)
            row["unequal_batches"] = step_pairs(runs[name], reference)[1]
            row["ratio"] = total_ratio(runs[name].round_seconds, reference.round_seconds, warmup)
            row["ratio_rounds"] = round_ratios(runs[name].round_seconds, reference.round_seconds, warmup)
            row["paired_median_ratio"] = paired_speedup(runs[name], reference, warmup)
            if model is not None:
                row["work_ratio"] = paired_work_ratio(runs[name], reference, warmup, model)
    disturbed = disturbances({n: p.round_seconds for n, p in runs.items()}, warmup, other_cores, len(usable_cores()))
    result = {
        "task": workload.task,
        "title": workload.title(),
        "workload": workload.describe(),
        "command": workload.command(),
        "unit": workload.unit,
        "apart": getattr(workload, "apart", ""),
        "reference": workload.reference,
        "memory_kind": memory_kind,
        "environment": environment(),
        "peers": rows,
        "other_cores": other_cores,
        "reliable": not disturbed,
        "disturbed": disturbed,
    }
    if peak is not None:
        result["matmul_peak"] = peak
    if reference is not None:
        result["padding_share"] = reference.padding_share(workload.warmup, workload.unit)
    return result


def run_bench(
    workload: Workload, out_dir: str = "bench-out", console: Console | None = None, overwrite: bool = False
) -> dict:
    console = console or Console(width=190)  # the table's 14 columns unabridged
    replacing = BENCH_RUN.claim(out_dir, overwrite)  # an earlier benchmark's --out: refused before measuring
    if replacing:
        console.print(replacing, soft_wrap=True)  # one line, however long
    device = workload.device
    with console.status("Preparing data and the initial model, measuring the matmul peak..."):
        data = workload.data()
        model = workload.model()
        counts_work = workload.counts_work
        dtype = torch.bfloat16 if getattr(workload, "bf16", False) else torch.float32
        peak = asdict(matmul_peak(dtype, device)) if counts_work else None
        flops = ModelFlops.of(model) if counts_work else None
        extras = workload.extras(model, data)
        initial = SpilledModel(model)
        del model  # each peer loads its own copy: no resident initial model in any peer's peak memory
    if not initial.spilled:
        console.print("[yellow]The initial model could not be pickled: it stays in memory, in every peak.[/]")
    runs = {peer: PeerRuns(peer) for peer in workload.peers}
    memory = PeakMemory(device)
    order = interleaved_order(workload.peers, workload.rounds)
    load = OtherWork()  # other processes' CPU time over the measured segments (steadiness.py)
    try:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("benchmark", total=len(order))
            for round_index, peer in order:
                progress.update(task, description=f"round {round_index + 1}/{workload.rounds}: {peer}")
                if workload.isolate:
                    isolated = run_segment_isolated(workload, peer, initial.file, data, device, round_index)
                    add_isolated(runs[peer], isolated)
                else:
                    run_segment(workload, peer, initial, data, runs[peer], memory)
                progress.advance(task)
    finally:
        initial.close()
    result = summarize(workload, runs, memory.kind, flops, peak, load.sample())
    result["initial_model_resident"] = not initial.spilled
    result.update(extras)
    result["files"] = [str(p) for p in write_reports(result, out_dir, console)]
    return result
