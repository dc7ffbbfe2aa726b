"""`bench.png`: one bar per peer for its throughput (the workload's unit per second, with the ratio to the
reference peer on the bar) and for peak memory, beside bench.md and bench.json. Needs the `plot` extra
(matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

from turbotrain.bench.workload import UNIT_KEYS
from turbotrain.utils.plotting import pyplot


def plot_bench(result: dict, path: Path) -> Path:
    plt = pyplot()
    names = list(result["peers"])
    rows = [result["peers"][n] for n in names]
    fig, (speed, memory) = plt.subplots(1, 2, figsize=(10, 3.8))
    unit = result.get("unit", "tokens")
    bars = speed.bar(names, [r.get(UNIT_KEYS[unit]) or 0 for r in rows], color="tab:blue")
    for bar, row in zip(bars, rows):
        if row.get("ratio"):
            speed.annotate(
                f"{row['ratio']:.2f}x",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=9,
            )
    speed.set_ylabel(f"{unit}/s (median)")
    memory.bar(names, [r.get("peak_memory_mb") or 0 for r in rows], color="tab:orange")
    memory.set_ylabel(f"peak memory, MB ({result.get('memory_kind', 'measured')})"[:60])
    for axis in (speed, memory):
        axis.tick_params(axis="x", labelrotation=20)
        axis.grid(axis="y", alpha=0.3)
    env = result.get("environment", {})
    fig.suptitle(f"turbotrain bench {env.get('date', '')}: {env.get('cpu', '')}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
