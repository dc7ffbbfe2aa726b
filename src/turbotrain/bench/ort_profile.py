"""Where ONNX Runtime spends a training step: its own per-node profiler, summed by operator type.

`turbotrain profile-ort` trains the benchmark workload for a few steps with `backend="onnxruntime"` and
`enable_profiling` on every session, then sums the profiler's node events (kernel time, excluding
ONNX Runtime's fences and the session run overhead) per op type over the steps after the first two
(those export and warm up). A script, not a test. An `out_dir` holding an earlier profile (`op_times.json`,
`ort*.json`) is refused unless `--overwrite` (`PROFILE_RUN`); only this run's profiles are summed.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table
from transformers.trainer_callback import PrinterCallback

from turbotrain.args import TurboTrainingArguments
from turbotrain.bench.workloads.corpus_lm import CorpusLM
from turbotrain.trainer import TurboTrainer
from turbotrain.utils.run_folder import RunFolder

PROFILE_RUN = RunFolder(
    what="an ONNX Runtime profile",
    marks=("op_times.json", "ort*.json"),
    folder_flag="--out",
    replaces="op_times.json is rewritten from this run's profiles (the earlier ort*.json files stay, not counted)",
)


def op_times(profile_files: list[Path], skip_runs: int = 2) -> dict[str, float]:
    """Milliseconds per op type over the session runs after the first `skip_runs` of each session."""
    totals: dict[str, float] = defaultdict(float)
    for path in profile_files:
        try:
            events = json.loads(path.read_text())
        except ValueError:  # a session that never ran writes an empty profile
            continue
        runs = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
        start = runs[skip_runs] if len(runs) > skip_runs else float("inf")
        for event in events:
            if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= start:
                totals[event["args"].get("op_name", "?")] += event["dur"] / 1000
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def profile_onnxruntime(
    workload: CorpusLM,
    steps: int = 5,
    out_dir: str = "profile-ort",
    console: Console | None = None,
    overwrite: bool = False,
) -> dict[str, float]:
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"--steps must be a positive whole number, got {steps}")
    console = console or Console()
    replacing = PROFILE_RUN.claim(out_dir, overwrite)  # an earlier profile: refused before any training
    if replacing:
        console.print(replacing, soft_wrap=True)  # one line, however long
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    earlier = set(out.glob("ort*.json"))  # an earlier run's, kept by --overwrite
    data, model = workload.data(), workload.model()
    options = {"session_options": {"enable_profiling": True, "profile_file_prefix": str(out / "ort")}}
    with tempfile.TemporaryDirectory() as tmp:
        common = {**workload.common_arguments(tmp), "max_steps": steps}
        args = TurboTrainingArguments(backend="onnxruntime", backend_options=options, **common)
        trainer = TurboTrainer(model=model, args=args, train_dataset=data.train, data_collator=data.collator)
        trainer.remove_callback(PrinterCallback)
        with console.status(f"Training {steps} steps with ONNX Runtime's profiler on..."):
            trainer.train()
        sessions = _sessions(trainer)
    for session in sessions:
        session.end_profiling()
    totals = op_times(sorted(set(out.glob("ort*.json")) - earlier))  # this run's profiles only
    (out / "op_times.json").write_text(json.dumps(totals, indent=2) + "\n")
    _print(console, totals, steps - 2)
    return totals


def _sessions(trainer) -> list:
    import gc

    from turbotrain.backends.ort_graph import OrtGraph

    # type(), not isinstance(): a dead weakref proxy among the objects raises ReferenceError on isinstance
    return [g.session for g in gc.get_objects() if issubclass(type(g), OrtGraph) and g.session is not None]


def _print(console: Console, totals: dict[str, float], steps: int) -> None:
    whole = sum(totals.values()) or 1.0
    table = Table(title=f"ONNX Runtime kernel time by op type, {steps} steps")
    for column in ("op type", "ms", "share"):
        table.add_column(column, justify="right")
    for op, ms in list(totals.items())[:15]:
        table.add_row(op, f"{ms:,.0f}", f"{ms / whole:.0%}")
    console.print(table)
