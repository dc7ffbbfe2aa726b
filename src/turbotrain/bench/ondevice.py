"""On-device fine-tuning benchmark: `turbotrain.ondevice` (ONNX Runtime + numpy) vs torch eager, for the
same head fine-tune of a small BERT, each in its own process, interleaved (torch, ondevice, torch, ...).

Reports artifact sizes, export time, median step time per round and the peak resident memory of each
process (interpreter and libraries included: that is what a device must hold). A script, not a test.
An `out` holding an earlier run (`ondevice.json`, `artifacts/`) is refused unless `--overwrite` (`ONDEVICE_RUN`).
"""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import BertConfig, BertForSequenceClassification

from turbotrain.bench.workload import check_bounds
from turbotrain.pretrain.shape import ModelShape
from turbotrain.utils.run_folder import RunFolder

ONDEVICE_RUN = RunFolder(
    what="an on-device benchmark",
    marks=("ondevice.json", "artifacts"),
    folder_flag="--out",
    replaces="artifacts/ and ondevice.json are rewritten",
)


@dataclass
class OnDeviceBench(ModelShape):
    """The benchmark's BERT shares the project's model shape (hidden 256, 4 layers, vocab 8,000, 16 x 128)."""

    num_labels: int = 2
    trainable: tuple[str, ...] = ("classifier.", "bert.pooler.")
    rounds: int = 3
    steps: int = 20
    warmup: int = field(default=3, metadata={"min": 0})
    out: str = "bench-ondevice"

    def __post_init__(self):
        check_bounds(self)  # before any export or training: a bad count is one line naming its flag
        if not self.trainable:
            raise ValueError("--trainable needs at least one parameter-name prefix")

    def model(self) -> BertForSequenceClassification:
        torch.manual_seed(self.seed)
        return BertForSequenceClassification(
            BertConfig(
                vocab_size=self.vocab_size,
                hidden_size=self.hidden_size,
                num_hidden_layers=self.num_layers,
                num_attention_heads=self.num_heads,
                intermediate_size=4 * self.hidden_size,
                num_labels=self.num_labels,
            )
        )


def _worker(mode: str, cfg: OnDeviceBench, artifacts: Path) -> dict:
    command = [
        sys.executable,
        "-m",
        "turbotrain.bench.ondevice_worker",
        mode,
        str(artifacts),
        str(cfg.steps),
        str(cfg.warmup),
        str(cfg.batch_size),
        str(cfg.seq_len),
        str(cfg.vocab_size),
        str(cfg.num_labels),
    ]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_ondevice_bench(cfg: OnDeviceBench, overwrite: bool = False) -> dict:
    from rich.console import Console

    from turbotrain.export import export_training_artifacts

    console = Console()
    replacing = ONDEVICE_RUN.claim(cfg.out, overwrite)  # an earlier run's folder: refused before any export
    if replacing:
        console.print(replacing, soft_wrap=True)  # one line, however long
    out = Path(cfg.out)
    artifacts = out / "artifacts"
    model = cfg.model()
    start = time.perf_counter()
    with console.status("Exporting training artifacts..."):
        exported = export_training_artifacts(model, artifacts, trainable=list(cfg.trainable))
    export_s = time.perf_counter() - start
    model.save_pretrained(str(artifacts / "torch-model"))
    runs: dict[str, list[dict]] = {"torch": [], "ondevice": []}
    for round_ in range(cfg.rounds):
        for mode in ("torch", "ondevice"):
            with console.status(f"round {round_ + 1}/{cfg.rounds}: {mode}..."):
                runs[mode].append(_worker(mode, cfg, artifacts))
    summary = {
        mode: {
            "step_ms": statistics.median(r["step_ms"] for r in rs),
            "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs),
            "torch_loaded": rs[0]["torch_loaded"],
        }
        for mode, rs in runs.items()
    }
    first_losses = {mode: rs[0]["losses"][:3] for mode, rs in runs.items()}
    result = {
        "config": asdict(cfg),
        "parameters": sum(p.numel() for p in model.parameters()),
        "trainable_parameters": sum(
            v for v in (p.numel() for n, p in model.named_parameters() if n in exported.manifest.trainable)
        ),
        "export_seconds": export_s,
        "artifact_bytes": {k: v for k, v in exported.sizes().items()},
        "summary": summary,
        "speedup_ondevice_vs_torch": summary["torch"]["step_ms"] / summary["ondevice"]["step_ms"],
        "first_losses": first_losses,
        "runs": runs,
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
    }
    (out / "ondevice.json").write_text(json.dumps(result, indent=2) + "\n")
    _print(console, result)
    return result


def _print(console, result: dict) -> None:
    console.print(
        f"BERT {result['parameters'] / 1e6:.1f} M parameters, training "
        f"{result['trainable_parameters']:,}; export {result['export_seconds']:.0f} s"
    )
    for name, size in result["artifact_bytes"].items():
        console.print(f"  {name:<24} {size / 1e6:8.2f} MB")
    for mode, row in result["summary"].items():
        console.print(
            f"  {mode:<9} step {row['step_ms']:7.1f} ms   peak RSS {row['peak_rss_mb']:7.0f} MB   "
            f"torch imported: {row['torch_loaded']}"
        )
    console.print(f"  on-device step time vs torch: {result['speedup_ondevice_vs_torch']:.2f}x")
