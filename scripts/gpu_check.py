"""One prepared device check: parity of every pass and backend on the device (fp32 and bf16), the host-sync
audit of turbotrain's steps, then the benchmark table against stock and its peers, as one markdown report.

    python scripts/gpu_check.py --out gpu_check.md                    # on a CUDA GPU: all of it
    python scripts/gpu_check.py --device cpu --quick                  # CI: the same code paths at tiny sizes
    python scripts/gpu_check.py --only parity,sync,backends,bench --budget-s 420
    python scripts/gpu_check.py --only realshape --out realshape.md   # published shapes, 3 rounds (330 s)
    python scripts/gpu_check.py --only kernels,heads,realshape        # the first call of a 15-minute lease (330 s)

Sections (scripts/gpu_check_parity.py, scripts/gpu_check_bench.py say what each measures):
  parity    every pass, alone and together, one step against stock: loss, every gradient, finiteness
  sync      each pass's step under torch.cuda.set_sync_debug_mode ("warn" to attribute, then "error")
  backends  inductor and onnxruntime one step against eager; xla three Trainer steps against stock
  kernels   packed attention's exact kernels timed at published layouts on chat-like lengths, and the measured
            choice against stock + flattening's (scripts/gpu_check_kernels.py)
  heads     the LM head and its loss at the two shapes' vocabularies, each way (stock, turbotrain's chunked head
            with eager or fused softmax, TRL's kernel, Liger's): time and peak memory (scripts/gpu_check_heads.py)
  sharded   DeepSpeed ZeRO-3 and FSDP2 (torchrun, a process per GPU): losses and weights against stock under each
  bench     sft, sft-lora, clm, mlm, asr in bf16: tokens/s, MFU (H200 bf16 peak), peak memory, loss vs stock
  realshape Qwen2.5-0.5B and Llama-3.2-1B shapes: SFT full and LoRA, DPO; 3 interleaved rounds, medians (not
            in the default sections: `--only realshape`; a run with it has a default budget of 330 s)
Time: `--budget-s` (default 450 on CUDA: under 8 minutes on one H200 with the start-up) bounds the whole run;
the child processes (xla, the sharded engines) get at most what is left of it (skipped under 30 s); the benchmark rows run in priority order (stock and turbotrain first, torch_compile last) and a row that
would start too late is listed as skipped, never cut off midway. Offline: models from configs, data made
here, no download (HF_HUB_OFFLINE is set). What the device image lacks travels as wheels:
scripts/gpu_wheels.sh (docs/gpu.md). Exit status 1 if a parity, sync or backend row FAILs or a row ERRORs.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

STARTED = time.monotonic()  # main's budget counts from here: the imports of torch and Transformers are in it

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TURBOTRAIN_CACHE", tempfile.mkdtemp(prefix="turbotrain-gpu-check-"))  # no cached auto choice

import torch  # noqa: E402

SECTIONS = ("parity", "sync", "backends", "kernels", "heads", "sharded", "bench", "realshape")
DEFAULT_SECTIONS = SECTIONS[:-1]
NEED_S = {"torch_compile": 75.0}  # seconds a row needs left to start (compiling rows more)
DEFAULT_NEED_S = 20.0


class Deadline:
    def __init__(self, seconds: float, start: float | None = None):
        self.end = (time.monotonic() if start is None else start) + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def cap(self, seconds: float) -> float:
        """A child process's time limit: `seconds`, or what is left of the budget where that is less (>= 0)."""
        return max(min(seconds, self.left()), 0.0)


def markdown(rows: list[dict], columns: list[str] | None = None) -> str:
    if not rows:
        return "(none)\n"
    columns = columns or list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(c, "")).replace("|", "/") for c in columns) + " |")
    return "\n".join(lines) + "\n"


def environment(device: torch.device) -> str:
    import transformers

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "CPU"
    try:
        commit = subprocess.run(
            # "-dirty" where the tree differs from HEAD (a device copy's git metadata may be older than its files)
            ["git", "describe", "--always", "--dirty"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout
    except OSError:
        commit = "?"
    return (
        f"device: {name}; torch {torch.__version__} (CUDA {torch.version.cuda}); transformers "
        f"{transformers.__version__}; python {platform.python_version()}; turbotrain commit {commit.strip() or '?'}"
    )


def bench_plan(quick: bool) -> list[tuple[str, str]]:
    """(task, peer) in the order they run: stock and turbotrain everywhere, then the peers, compiles last."""
    from scripts.gpu_check_bench import PEERS, QUICK_PEERS, TASKS

    peers = {task: QUICK_PEERS[task] if quick else PEERS for task in TASKS}
    first = [(task, peer) for task in TASKS for peer in peers[task] if peer in ("stock (sdpa)", "turbotrain")]
    middle = [(t, p) for t in TASKS for p in peers[t] if (t, p) not in first and p != "torch_compile"]
    last = [(t, p) for t in TASKS for p in peers[t] if p == "torch_compile"]
    return first + middle + last


def bench_rows(device: torch.device, quick: bool, deadline: Deadline, on_progress=None) -> list[dict]:
    """The benchmark section's rows; `on_progress(rows)` after each measured peer (the report so far)."""
    from scripts.gpu_check_bench import (
        H200_BF16_PEAK,
        build_examples,
        build_model,
        loss_difference,
        run_peer,
        unavailable,
    )

    peak = H200_BF16_PEAK if device.type == "cuda" else _cpu_peak()
    built: dict[str, tuple] = {}
    results: dict[tuple[str, str], dict] = {}
    rows = []
    for task, peer in bench_plan(quick):
        row = {"task": task, "peer": peer}
        why = unavailable(task, peer)
        need = 0.0 if quick else NEED_S.get(peer, DEFAULT_NEED_S)
        if why is None and deadline.left() < need:
            why = f"skipped: time budget ({deadline.left():.0f} s left, needs ~{need:.0f} s)"
        if why is not None:
            rows.append({**row, "note": why})
            continue
        if task not in built:
            model = build_model(task, quick)
            built[task] = (model, build_examples(task, quick, model))
        print(f"bench: {task} / {peer} ({deadline.left():.0f} s of the budget left)", file=sys.stderr, flush=True)
        try:
            result = results[(task, peer)] = run_peer(task, peer, *built[task], device, quick)
        except Exception as error:  # one peer failing does not stop the table
            traceback.print_exc()  # the log says where
            rows.append({**row, "result": "ERROR", "note": f"{type(error).__name__}: {str(error)[:240]}"})
            continue
        rows.append(_bench_row(row, result, results.get((task, "stock (sdpa)")), peak, loss_difference))
        if on_progress is not None:
            on_progress(rows)
    order = {(r["task"], r["peer"]): i for i, r in enumerate(rows)}
    from scripts.gpu_check_bench import PEERS, TASKS

    rank = {(t, p): (TASKS.index(t), PEERS.index(p)) for t, p in order}
    return sorted(rows, key=lambda r: rank[(r["task"], r["peer"])])


def _bench_row(row: dict, result: dict, stock: dict | None, peak: float, loss_difference) -> dict:
    speed = result["tokens_s"] / stock["tokens_s"] if stock and stock["tokens_s"] else None
    difference = loss_difference(result["losses"], stock["losses"]) if stock else None
    note = result["summary"].removeprefix("turbotrain: ") if result["summary"] else ""
    return {
        **row,
        "tokens/s": f"{result['tokens_s']:,.0f}",
        "vs stock": f"{speed:.2f}x" if speed is not None else "",
        "MFU": f"{result['flops_s'] / peak:.1%}",
        "peak GiB": f"{result['peak_gb']:.1f}" if result["peak_gb"] is not None else "n/a (CPU)",
        "loss vs stock": f"{difference:.1e}" if difference is not None else "",
        "note": note,
    }


def _cpu_peak() -> float:
    from turbotrain.measure.peak import matmul_peak

    return matmul_peak(torch.float32, "cpu", size=256, repeats=2).flops_per_s


class Report(list):
    """The report's parts; each added part rewrites `out` so that a run cut off at its limit keeps what it measured."""

    def __init__(self, out: Path | None):
        super().__init__()
        self.out = out

    def append(self, part: str) -> None:
        super().append(part)
        print(part, flush=True)
        if self.out is not None:
            self.out.write_text("\n".join(self))

    def draft(self, part: str) -> None:
        """Write `out` with a section still running (`part`, its rows so far) after the parts kept."""
        if self.out is not None:
            self.out.write_text("\n".join([*self, part]))


def run(
    device: torch.device,
    quick: bool,
    sections: list[str],
    budget_s: float,
    out: Path | None = None,
    shapes: tuple[str, ...] | None = None,
    peers: tuple[str, ...] | None = None,
    kernel_lengths: tuple[int, int, int] | None = None,
    started: float | None = None,
) -> tuple[str, bool]:
    """The report and whether no row failed; `started`: when the budget began (`time.monotonic()`; now if None)."""
    from scripts import gpu_check_parity as parity

    deadline = Deadline(budget_s, start=started)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 parity in fp32, not TF32
    torch.backends.cudnn.allow_tf32 = False
    dtypes = (torch.float32, torch.bfloat16)
    parts = Report(out)
    parts.append(f"# turbotrain GPU check\n\n{environment(device)}; {'quick' if quick else 'full'} run\n")
    checked: list[dict] = []

    def section(name: str, title: str, make_rows) -> None:
        if name in sections:
            rows = guarded(name, make_rows, device)
            checked.extend(rows)
            parts.append(f"## {title}\n\n" + markdown(rows))

    section("parity", "Passes against stock (one step)", lambda: parity.pass_parity(device, dtypes))
    section("sync", "Host syncs in the step", lambda: parity.host_sync_audit(device))
    section("backends", "Backends against eager",
            lambda: parity.backend_parity(device, quick, xla_timeout_s=deadline.cap(240.0)))  # fmt: skip
    section("kernels", "Packed attention kernels (forward and backward of one layer's call)",
            lambda: _import("gpu_check_kernels").kernel_rows(device, quick, kernel_lengths))  # fmt: skip
    section("heads", "LM heads (forward and backward of the mean NLL on the kept rows)",
            lambda: _import("gpu_check_heads").head_rows(device, quick))  # fmt: skip
    section("sharded", "Sharded engines against stock under the same engine (fp32)",
            lambda: _import("gpu_check_sharded").sharded_rows(device, deadline.cap))  # fmt: skip
    bench: list[dict] = []
    if "bench" in sections:
        columns = ["task", "peer", "tokens/s", "vs stock", "MFU", "peak GiB", "loss vs stock", "result", "note"]
        peak = "H200 dense bf16 989.4 TFLOP/s" if device.type == "cuda" else "this CPU's measured fp32 matmul peak"
        heading = f"## Benchmark (bf16 on CUDA; MFU against {peak})\n\n"
        bench = bench_rows(
            device, quick, deadline, on_progress=lambda rows: parts.draft(heading + markdown(rows, columns))
        )
        parts.append(heading + markdown(bench, columns))
    if "realshape" in sections:
        from scripts.gpu_check_realshape import COLUMNS, SHAPES, realshape_rows

        def realshape_part(rows: list[dict], peak: str) -> str:
            from scripts.gpu_check_verdict import COLUMNS as BARS
            from scripts.gpu_check_verdict import verdict_rows

            heading = f"## Published shapes, 3 interleaved rounds (MFU against {peak})\n\n"
            bars = "\n### Against issue 45's bars (this call's rows; scripts/gpu_check_verdict.py merges calls)\n\n"
            judged = [row for row in rows if "section" not in row]  # not the row saying the section raised
            return heading + markdown(rows, COLUMNS) + bars + markdown(verdict_rows(judged, not quick), BARS)

        so_far: dict = {"rows": [], "peak": "n/a"}  # what a section that raises midway keeps

        def progress(rows: list[dict], peak: str) -> None:
            so_far.update(rows=rows, peak=peak)
            parts.draft(realshape_part(rows, peak))

        def measured() -> list[dict]:
            rows, so_far["peak"] = realshape_rows(device, quick, deadline, shapes or SHAPES, peers, progress)
            return rows

        rows = guarded("realshape", measured, device)
        if rows and rows[-1].get("section") == "realshape":  # it raised: the workloads it finished, then why
            rows = [*so_far["rows"], {"workload": "(the rest)", "peer": "", **rows[-1]}]
        checked += rows
        parts.append(realshape_part(rows, so_far["peak"]))
    failed = [r for r in checked if str(r.get("result", "")).startswith(("FAIL", "ERROR"))]
    failed += [r for r in bench if r.get("result") == "ERROR"]
    parts.append(f"\n{len(failed)} failing row(s); {max(deadline.left(), 0):.0f} s of the budget left.\n")
    return "\n".join(parts), not failed


def guarded(name: str, make_rows, device: torch.device) -> list[dict]:
    """`make_rows()`, or one ERROR row where it raised: one section's failure (an out-of-memory, a kernel that
    would not build) never takes the sections after it, nor the report."""
    try:
        return make_rows()
    except Exception as error:  # noqa: BLE001  (the row says it; the exit status counts it)
        traceback.print_exc()
        failed = [{"section": name, "result": "ERROR", "note": f"{type(error).__name__}: {str(error)[:300]}"}]
    if device.type == "cuda":  # out of the except: its traceback no longer holds the failed tensors
        torch.cuda.empty_cache()
    return failed


def _import(module: str):
    import importlib

    return importlib.import_module(f"scripts.{module}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and one timed step per peer (CI)")
    parser.add_argument(
        "--only", default=",".join(DEFAULT_SECTIONS), help=f"comma-separated sections: {', '.join(SECTIONS)}"
    )
    parser.add_argument("--shapes", default=None, help="realshape: comma-separated shapes (default both)")
    parser.add_argument("--peers", default=None, help="realshape: comma-separated peers (each workload's stock too)")
    parser.add_argument(
        "--kernel-lengths",
        default=None,
        help="kernels: TOKENS,MEDIAN,LONGEST of the packed batch (default 16384,500,4096)",
    )
    parser.add_argument("--budget-s", type=float, default=None, help="seconds for the whole run (default 450 on CUDA)")
    parser.add_argument("--out", type=Path, default=None, help="also write the report here (after each section)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run with --device cpu --quick for the CPU pass", file=sys.stderr)
        return 2
    sections = [s for s in args.only.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    default = 330.0 if "realshape" in sections else 450.0  # realshape: gpu_check_realshape.py's arithmetic
    budget = args.budget_s if args.budget_s is not None else (default if device.type == "cuda" else 3600.0)
    shapes = tuple(args.shapes.split(",")) if args.shapes else None
    peers = tuple(args.peers.split(",")) if args.peers else None
    start = time.monotonic()
    lengths = tuple(int(n) for n in args.kernel_lengths.split(",")) if args.kernel_lengths else None
    on_gpu_from = STARTED if device.type == "cuda" else None  # a GPU call's budget includes the imports
    report, ok = run(device, args.quick, sections, budget, args.out, shapes, peers, lengths, on_gpu_from)
    wall = f"Wall time {time.monotonic() - start:.0f} s.\n"
    report += wall
    print(wall)
    if args.out is not None:
        args.out.write_text(report)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
