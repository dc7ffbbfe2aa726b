"""The GPU check's `sharded` section: turbotrain under DeepSpeed ZeRO-3 and FSDP2 against stock under the same engine.

Each engine is one torchrun launch of tests/scale/sharded_worker.py (stock and turbotrain in the same processes,
fp32, TF32 off), with one process per GPU (NCCL); on a one-GPU machine that is a world of one, where ZeRO-3 and
FSDP2 still gather through their hooks. A row: the engine, the passes active, the largest per-step loss difference
relative to stock's, the trained weights' largest difference relative to the largest weight, PASS within 1e-4
(TF32 off; the CPU test, tests/scale/test_sharded.py, holds 1e-5). On the CPU the section says it is skipped:
tests/scale/test_sharded.py runs the same worker there, under gloo, on every suite run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("zero3", "fsdp2")
TOLERANCE = 1e-4


def sharded_rows(device: torch.device, cap: Callable[[float], float] = lambda seconds: seconds) -> list[dict]:
    """A row per engine; `cap(seconds)`: the time a launch may take (the check's budget left, at most 150 s)."""
    if device.type != "cuda":
        note = "skipped on the CPU: tests/scale/test_sharded.py runs this worker under gloo"
        return [{"engine": engine, "note": note} for engine in ENGINES]
    processes = min(2, torch.cuda.device_count())
    return [_row(engine, processes, cap) for engine in ENGINES]


def _row(engine: str, processes: int, cap: Callable[[float], float]) -> dict:
    row = {"engine": engine, "processes": processes}
    if engine == "zero3" and importlib.util.find_spec("deepspeed") is None:
        return {**row, "result": "skipped", "note": "deepspeed is not installed here (extra: deepspeed)"}
    from scripts.gpu_check_parity import MIN_CHILD_S

    timeout_s = cap(150.0)
    if timeout_s < MIN_CHILD_S:
        return {**row, "result": "skipped", "note": f"time budget: {timeout_s:.0f} s left"}
    out = Path(tempfile.mkdtemp(prefix=f"gpu-check-{engine}-"))
    command = [
        *(sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}"),
        *("--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0", "-m", "tests.scale.sharded_worker"),
        *(str(out), engine, "cuda"),
    ]
    paths = [str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]  # wheels carried to /tmp/site stay
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {**row, "result": "ERROR", "note": f"timed out after {timeout_s:.0f} s"}
    if done.returncode != 0:
        from scripts.gpu_check_parity import last_error_line

        sys.stderr.write(f"--- {engine} worker's stderr (end) ---\n{done.stderr[-6000:]}\n")
        return {**row, "result": "ERROR", "note": last_error_line(done.stderr)}
    result = json.loads((out / "result.json").read_text())
    return {**row, **judge(result)}


def judge(result: dict) -> dict:
    """The row's figures and verdict from a worker's result.json."""
    stock, turbo = result["stock"]["losses"], result["turbo"]["losses"]
    losses = max(abs(a - b) / abs(b) for a, b in zip(turbo, stock)) if len(turbo) == len(stock) else float("inf")
    weights = result["weight_difference"]
    passes = ", ".join(result["turbo"]["passes"])
    ok = losses <= TOLERANCE and weights <= TOLERANCE and "label_sparsity" in passes and "padding_free" in passes
    return {
        "passes": passes,
        "loss vs stock": f"{losses:.1e}",
        "weights vs stock": f"{weights:.1e}",
        "result": "PASS" if ok else "FAIL",
    }
