"""Bench output: a console table, `bench.json`, `bench.md` (a dated row ready for benchmarks/) and, with the
`plot` extra installed, `bench.png` (chart.py). `BENCH_RUN`: a `--out` holding them is refused before the
benchmark starts unless `--overwrite` (utils/run_folder.py; runner.py asks)."""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path

import torch
import transformers
from rich.console import Console
from rich.table import Table

import turbotrain
from turbotrain.bench.workload import UNIT_KEYS
from turbotrain.utils.cpu import cap_note, cpu_model, matmul_flags
from turbotrain.utils.plotting import is_matplotlib_available
from turbotrain.utils.run_folder import RunFolder

BENCH_RUN = RunFolder(
    what="a benchmark",
    marks=("bench.json", "bench.md", "bench.png"),
    folder_flag="--out",
    replaces="bench.json, bench.md and bench.png are rewritten",
)
SPLIT = ("weights", "gradients", "optimizer", "logits", "activations")


def columns(result: dict) -> list[tuple[str, str]]:
    """(title, key) of the table's columns: the throughput in the workload's unit, the ratio to its reference."""
    unit = result.get("unit", "tokens")
    return [
        ("peer", "peer"),
        ("backend", "backend"),
        (f"{unit}/s", UNIT_KEYS[unit]),
        (f"x {result.get('reference', 'stock')}", "ratio"),
        ("x per round", "ratio_rounds"),
        ("work x", "work_ratio"),
        ("median step s", "median_step_s"),
        ("step s min-max", "step_s_range"),
        ("GFLOP/s", "gflops_per_s"),
        ("MFU", "mfu"),
        ("first step s", "first_step_s"),
        ("peak MB", "peak_memory_mb"),
        ("max abs dloss", "max_abs_loss_diff"),
        ("max rel dloss", "max_rel_loss_diff"),
    ]


def environment() -> dict:
    env = {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_flags": (" ".join(matmul_flags()) or "none of amx_bf16 avx512_bf16 amx_tile") + cap_note(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "turbotrain": turbotrain.__version__,
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def _cell(key: str, value) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, str):
        return value
    if key in {"max_abs_loss_diff", "max_rel_loss_diff"}:
        return f"{value:.1e}"
    if key == "mfu":
        return f"{value:.1%}"
    if key == "gflops_per_s":
        return f"{value:.1f}"
    if key in {"ratio", "work_ratio"}:
        return f"{value:.2f}x"
    if key in {"median_step_s", "first_step_s"}:
        return f"{value:.3f}"
    if key in {"examples_per_s", "mb"}:
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def rows(result: dict) -> list[list[str]]:
    """The table's cells; a disturbed run's ratios end in '?' (steadiness.py)."""
    keys = [key for _, key in columns(result)]
    doubt = "" if result.get("reliable", True) else "?"
    table = []
    for name, row in result["peers"].items():
        cells = [_cell(k, name if k == "peer" else _value(row, k)) for k in keys]
        table.append([c + doubt if k == "ratio" and c != "-" else c for k, c in zip(keys, cells)])
    return table


def _value(row: dict, key: str):
    """A row's value for a column; the spreads are shown as 'low-high'."""
    if key == "ratio_rounds":
        ratios = row.get("ratio_rounds") or []
        return f"{min(ratios):.2f}-{max(ratios):.2f}" if len(ratios) > 1 else None
    if key == "step_s_range":
        low, high = row.get("step_s_min"), row.get("step_s_max")
        return f"{low:.3f}-{high:.3f}" if low is not None and high is not None else None
    return row.get(key)


def unreliable_line(result: dict) -> str | None:
    """One warning line for a disturbed run (steadiness.py), None for a steady one."""
    if result.get("reliable", True):
        return None
    return "UNRELIABLE (ratios marked ?): " + "; ".join(result.get("disturbed") or ["the run was disturbed"]) + "."


def split_rows(result: dict) -> list[list[str]]:
    """Per peer: peak MB, then the split of its segment's growth (MB), where measured."""
    table = []
    for name, row in result["peers"].items():
        split = row.get("memory_split_mb")
        if split:
            cells = [split.get(f"{part}_mb") for part in SPLIT]
            table.append([name, _cell("peak", row.get("peak_memory_mb")), *(_cell("mb", c) for c in cells)])
    return table


def markdown(result: dict) -> str:
    env, w = result["environment"], result["workload"]
    hardware = env.get("gpu") or f"{env['cpu']} ({env['torch_threads']} threads)"
    titles = [title for title, _ in columns(result)]
    lines = [
        f"### {env['date']}: {result['title']}",
        "",
        f"Hardware: {hardware}. torch {env['torch']}, transformers {env['transformers']}, "
        f"turbotrain {env['turbotrain']}, Python {env['python']}.",
        f"Command: `{result.get('command', 'turbotrain bench')}`",
        f"Rounds {w['rounds']} x {w['steps']} measured steps (+{w['warmup']} warm-up) per peer, interleaved"
        f"{', each segment in a process of its own' if w.get('isolate') else ''}; memory: {result['memory_kind']}.",
        *_data_lines(result),
        *([f"**{unreliable_line(result)}**"] if unreliable_line(result) else []),
        "",
        "| " + " | ".join(titles) + " |",
        "|" + "---|" * len(titles),
        *("| " + " | ".join(r) + " |" for r in rows(result)),
    ]
    split = split_rows(result)
    if split:
        lines += [
            "",
            "Peak memory and where the segment's growth went (MB; measure/memory.py: activations are the rest):",
            "",
            "| peer | peak MB | " + " | ".join(SPLIT) + " |",
            "|" + "---|" * (len(SPLIT) + 2),
            *("| " + " | ".join(r) + " |" for r in split),
        ]
    return "\n".join(lines) + "\n"


def _data_lines(result: dict) -> list[str]:
    lines = [_ratio_line(result)] if "reliable" in result else []
    peak = result.get("matmul_peak")
    if peak:
        flags = result["environment"].get("cpu_flags")
        lines.append(
            f"Matmul peak ({peak['dtype']}, {peak['size']}², measured at the start): "
            f"{peak['flops_per_s'] / 1e9:,.1f} GFLOP/s on {peak['device']}"
            f"{f' (CPU flags: {flags})' if flags else ''}; MFU = achieved FLOP/s (measure/flops.py) / that."
        )
    if result.get("padding_share") is not None:
        label = "Label padding" if result.get("unit") == "label tokens" else "Padding"
        lines.append(
            f"{label} share of {result.get('reference', 'stock')}'s batches (measured steps): "
            f"{result['padding_share']:.0%}; {result.get('unit', 'tokens')}/s counts real ones only."
        )
    if "length_histogram" in result:
        shown = ", ".join(f"{k}: {v:,}" for k, v in result["length_histogram"].items())
        lines.append(f"Example lengths (tokens): {shown}.")
    if "head_share" in result:
        lines.append(f"Head share (bench/head_share.py): {result['head_share']['line']}.")
    lines += _apart_lines(result)
    for name, row in result["peers"].items():
        report = row.get("backend_report")
        if report:
            shown = ", ".join(f"{k} {v}" for k, v in report.items() if k != "fallbacks")
            line = f"{name} ({row['backend']}): {shown}"
            if "fallbacks" in report:  # backends that can fall back to eager say how often
                fallbacks = report["fallbacks"] or []
                line += f"; graphs falling back to eager: {len(fallbacks)}"
                line += f" ({'; '.join(fallbacks)[:300]})" if fallbacks else ""
            lines.append(line + ".")
    return lines


def _ratio_line(result: dict) -> str:
    load = result.get("other_cores")
    measured = f"{load:.1f} cores" if load is not None else "not measured (no /proc)"
    return (
        f"x {result.get('reference', 'stock')}: its seconds over the peer's, summed over the same measured steps "
        f"(the throughput columns' ratio), with each round's beside it; other processes' CPU during the run: {measured}."
    )


def _apart_lines(result: dict) -> list[str]:
    """The part of the step timed apart (GRPO's generation), and the steps whose batches differed from the
    reference's (left out of the loss difference)."""
    peers, lines = result["peers"], []
    if result.get("apart"):
        shown = ", ".join(
            f"{name} {row['apart_median_s']:.3f}" for name, row in peers.items() if "apart_median_s" in row
        )
        lines.append(
            f"{result['apart'].capitalize()}, timed apart (not in the step seconds, the ratio or the throughput), "
            f"median s per measured step: {shown}."
        )
    unequal = {name: row["unequal_batches"] for name, row in peers.items() if row.get("unequal_batches")}
    if unequal:
        shown = ", ".join(f"{name} {count}" for name, count in unequal.items())
        lines.append(
            f"Steps whose batch differed from {result.get('reference', 'stock')}'s (no loss compared): {shown}."
        )
    return lines


def write_reports(result: dict, out_dir: str | Path, console: Console) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "bench.json", out / "bench.md"
    json_path.write_text(json.dumps(result, indent=2))
    md_path.write_text(markdown(result))
    table = Table(title=f"turbotrain bench: {result.get('title', '')}")
    for title, _ in columns(result):
        table.add_column(title, justify="right")
    for r in rows(result):
        table.add_row(*r)
    console.print(table)
    for line in _data_lines(result):
        console.print(line)
    warning = unreliable_line(result)
    if warning:
        console.print(f"[bold yellow]{warning}[/]")
    paths = [json_path, md_path]
    if is_matplotlib_available():
        from turbotrain.bench.chart import plot_bench

        paths.append(plot_bench(result, out / "bench.png"))
    console.print(f"wrote {', '.join(str(p) for p in paths)}")
    return paths
