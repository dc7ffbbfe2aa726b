"""Bench output: a console table, `bench.json`, `bench.md` (a dated row ready for benchmarks/) and, with the
`plot` extra installed, `bench.png` (chart.py)."""

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
from turbotrain.utils.cpu import cpu_model, matmul_flags
from turbotrain.utils.plotting import is_matplotlib_available

COLUMNS = [
    ("peer", "peer"),
    ("backend", "backend"),
    ("tokens/s", "tokens_per_s"),
    ("x stock", "ratio_to_stock"),
    ("median step s", "median_step_s"),
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
        "cpu_flags": " ".join(matmul_flags()) or "none of amx_bf16 avx512_bf16 amx_tile",
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
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if key in {"max_abs_loss_diff", "max_rel_loss_diff"}:
        return f"{value:.1e}"
    if key == "mfu":
        return f"{value:.1%}"
    if key == "gflops_per_s":
        return f"{value:.1f}"
    if key == "ratio_to_stock":
        return f"{value:.2f}x"
    if key in {"median_step_s", "first_step_s"}:
        return f"{value:.3f}"
    return f"{value:,.0f}"


def rows(result: dict) -> list[list[str]]:
    return [
        [_cell(k, name if k == "peer" else row.get(k)) for _, k in COLUMNS] for name, row in result["peers"].items()
    ]


def markdown(result: dict) -> str:
    env, w = result["environment"], result["workload"]
    hardware = env.get("gpu") or f"{env['cpu']} ({env['torch_threads']} threads)"
    task = (
        {"mlm": "RoBERTa MLM", "cls": "RoBERTa sequence classification", "clm": "GPT-2 causal LM"}.get(w["task"])
        or f"Qwen2-shaped SFT, {'LoRA' if w.get('lora') else 'full fine-tune'}, {'untied' if w.get('untied') else 'tied'},"
    )
    off = f" (turbo without {', '.join(w['turbo_off'])})" if w.get("turbo_off") else ""
    lengths = f"seq {w['seq_len']}" if w["lengths"] == "fixed" else f"variable lengths <= {w['seq_len']}"
    lines = [
        f"### {env['date']}: {task} h{w['hidden_size']} L{w['num_layers']} {lengths} "
        f"vocab {w['vocab_size']:,} batch {w['batch_size']}{' bf16' if w['bf16'] else ' fp32'}{off}",
        "",
        f"Hardware: {hardware}. torch {env['torch']}, transformers {env['transformers']}, "
        f"turbotrain {env['turbotrain']}, Python {env['python']}.",
        f"Command: `{result.get('command', 'turbotrain bench')}`",
        f"Rounds {w['rounds']} x {w['steps']} measured steps (+{w['warmup']} warm-up) per peer, interleaved; "
        f"memory: {result['memory_kind']}.",
        *_data_lines(result),
        "",
        "| " + " | ".join(title for title, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows(result)]
    return "\n".join(lines) + "\n"


def _data_lines(result: dict) -> list[str]:
    lines = []
    peak = result.get("matmul_peak")
    if peak:
        flags = result["environment"].get("cpu_flags")
        lines.append(
            f"Matmul peak ({peak['dtype']}, {peak['size']}², measured at the start): "
            f"{peak['flops_per_s'] / 1e9:,.1f} GFLOP/s on {peak['device']}"
            f"{f' (CPU flags: {flags})' if flags else ''}; MFU = achieved FLOP/s (bench/flops.py) / that."
        )
    if "padding_share" in result:
        lines.append(
            f"Padding share of stock's batches (measured steps): {result['padding_share']:.0%}; "
            f"tokens/s counts real tokens only."
        )
    if "length_histogram" in result:
        shown = ", ".join(f"{k}: {v:,}" for k, v in result["length_histogram"].items())
        lines.append(f"Example lengths (tokens): {shown}.")
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


def write_reports(result: dict, out_dir: str | Path, console: Console) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "bench.json", out / "bench.md"
    json_path.write_text(json.dumps(result, indent=2))
    md_path.write_text(markdown(result))
    table = Table(title="turbotrain bench")
    for title, _ in COLUMNS:
        table.add_column(title, justify="right")
    for r in rows(result):
        table.add_row(*r)
    console.print(table)
    for line in _data_lines(result):
        console.print(line)
    paths = [json_path, md_path]
    if is_matplotlib_available():
        from turbotrain.bench.chart import plot_bench

        paths.append(plot_bench(result, out / "bench.png"))
    console.print(f"wrote {', '.join(str(p) for p in paths)}")
    return paths
