"""One story per bench run: the ratio and the throughput from one statistic, each peer's spread, and a verdict on
whether the machine let the run measure anything.

* `total_ratio`: the reference's seconds over this peer's, summed over the steps they share (same round, same
  step index: the same batch). Every peer gets the same batches, so this is exactly the ratio of the two peers'
  throughput columns: the "x stock" column and the units/s columns can no longer tell two stories (the median of
  per-step ratios could: 1.22x beside 655 against 955 tokens/s, on a busy machine). `round_ratios`: the same
  per round, whose spread is shown beside it; `step_spread`: a peer's fastest and slowest measured step.
* `disturbances`: why the figures are not to be trusted, empty for a steady run:
  - other processes' CPU time during the run (`OtherWork`: /proc/stat less this process's own and its waited-for
    children's) above `OTHER_CORES` cores' worth on average;
  - a stall: the same step (same batch, same peer) slower than `REPEAT_SPREAD` times its fastest repeat in
    another round (needs 2 rounds or more; a quiet machine repeats a step within a few per cent).
  A disturbed run's ratios are marked unreliable in the table, bench.json (`reliable`, `disturbed`) and bench.md.
"""

from __future__ import annotations

from collections.abc import Sequence

OTHER_CORES = 0.5  # other processes' average busy cores during the run above which it is disturbed
REPEAT_SPREAD = 3.0  # slowest / fastest repeat of the same step across rounds above which it stalled


def _pairs(own: Sequence[float], theirs: Sequence[float], warmup: int) -> list[tuple[float, float]]:
    return list(zip(own[warmup:], theirs[warmup:]))


def total_ratio(own_rounds: Sequence[Sequence[float]], ref_rounds: Sequence[Sequence[float]], warmup: int) -> float:
    """Reference seconds over own seconds, summed over the steps both ran (rounds of unequal length: the common
    steps); nan when they share none."""
    pairs = [p for own, ref in zip(own_rounds, ref_rounds) for p in _pairs(own, ref, warmup)]
    own_total = sum(mine for mine, _ in pairs)
    return sum(ref for _, ref in pairs) / own_total if own_total else float("nan")


def round_ratios(own_rounds, ref_rounds, warmup: int) -> list[float]:
    return [total_ratio([own], [ref], warmup) for own, ref in zip(own_rounds, ref_rounds)]


def step_spread(rounds: Sequence[Sequence[float]], warmup: int) -> tuple[float, float] | None:
    measured = [s for seconds in rounds for s in seconds[warmup:]]
    return (min(measured), max(measured)) if measured else None


def worst_repeat(rounds: Sequence[Sequence[float]], warmup: int) -> tuple[float, int] | None:
    """The largest slowest/fastest ratio over the rounds' repeats of one measured step, and that step's index
    (counted from the first measured step); None with fewer than two rounds."""
    worst = None
    for index, repeats in enumerate(zip(*(seconds[warmup:] for seconds in rounds))):
        if len(rounds) < 2 or min(repeats) <= 0:
            continue
        spread = max(repeats) / min(repeats)
        if worst is None or spread > worst[0]:
            worst = (spread, index)
    return worst


def disturbances(
    peers: dict[str, Sequence[Sequence[float]]], warmup: int, other_cores: float | None, usable_cores: int
) -> list[str]:
    """Why the run's figures are unreliable (module docstring); `peers`: name -> every round's step seconds."""
    found = []
    if other_cores is not None and other_cores > OTHER_CORES:
        found.append(
            f"other processes kept {other_cores:.1f} of {usable_cores} cores busy during the run (above {OTHER_CORES})"
        )
    for name, rounds in peers.items():
        worst = worst_repeat(rounds, warmup)
        if worst is not None and worst[0] > REPEAT_SPREAD:
            repeats = [seconds[warmup + worst[1]] for seconds in rounds if len(seconds) > warmup + worst[1]]
            shown = ", ".join(f"{s:.3f}" for s in repeats)
            found.append(
                f"{name}'s measured step {worst[1] + 1} took {shown} s in its rounds ({worst[0]:.1f}x apart: a stall)"
            )
    return found
