"""The unet workload: diffusers' training step per backend, on the one runner and report writer."""

from __future__ import annotations

import pytest

from tests.bench.tiny import SCHEDULE
from turbotrain.bench.runner import run_bench
from turbotrain.bench.workloads import make_workload

pytestmark = pytest.mark.requires_diffusion


def test_unet_peers_are_backends_compared_with_eager(tmp_path):
    workload = make_workload("unet", channels=(8, 16), sample_size=8, **{**SCHEDULE, "peers": ("eager",)})
    result = run_bench(workload, out_dir=str(tmp_path))
    eager = result["peers"]["eager"]
    assert result["reference"] == "eager" and eager["ratio"] == 1.0 and eager["max_abs_loss_diff"] == 0.0
    assert eager["examples_per_s"] > 0 and eager["memory_split_mb"]["logits_mb"] is None
    assert result["parameters"] > 0 and "| eager | eager |" in (tmp_path / "bench.md").read_text()
    with pytest.raises(ValueError, match="unknown backends"):
        make_workload("unet", peers=("stock",))
