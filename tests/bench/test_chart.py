"""`bench.png` beside bench.md/json: a bar chart of tokens/s and peak memory per peer (the plot extra)."""

from __future__ import annotations

import pytest
from rich.console import Console

from turbotrain.bench.report import write_reports

pytestmark = pytest.mark.requires_plot

RESULT = {
    "environment": {
        "date": "2026-12-01",
        "cpu": "test CPU",
        "torch_threads": 2,
        "python": "3.11",
        "torch": "2.13",
        "transformers": "5.24",
        "turbotrain": "0.1.0",
    },
    "workload": {
        "task": "mlm",
        "turbo_off": [],
        "lengths": "fixed",
        "seq_len": 32,
        "hidden_size": 32,
        "num_layers": 1,
        "vocab_size": 1000,
        "batch_size": 4,
        "bf16": False,
        "rounds": 1,
        "steps": 1,
        "warmup": 0,
    },
    "title": "RoBERTa MLM h32 L1 seq 32",
    "unit": "tokens",
    "reference": "stock",
    "memory_kind": "peak RSS",
    "peers": {
        "stock": {"backend": "eager", "tokens_per_s": 1000.0, "ratio": 1.0, "peak_memory_mb": 900.0},
        "turbo": {"backend": "eager", "tokens_per_s": 3400.0, "ratio": 3.4, "peak_memory_mb": 500.0},
    },
}


def test_bench_writes_a_png_chart_beside_its_reports(tmp_path):
    paths = write_reports(RESULT, tmp_path, Console(quiet=True))
    png = tmp_path / "bench.png"
    assert png in paths
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
