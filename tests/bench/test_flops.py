"""The work the bench counts per peer: the clm workload (GPT-2 on fixed blocks) reports MFU for every peer."""

from __future__ import annotations

import pytest

from tests.bench.tiny import tiny_workload


def test_clm_workload_is_gpt2_on_fixed_blocks():
    workload = tiny_workload("clm", vocab_size=500)
    assert type(workload.model()).__name__ == "GPT2LMHeadModel" and workload.causal
    assert "--task clm" in workload.command()
    with pytest.raises(ValueError, match="clm"):
        tiny_workload("clm", lengths="variable")


@pytest.mark.slow
def test_tiny_clm_bench_reports_mfu_for_every_peer(tmp_path):
    from turbotrain.bench.runner import run_bench

    workload = tiny_workload("clm")
    result = run_bench(workload, out_dir=tmp_path)
    assert result["matmul_peak"]["flops_per_s"] > 0
    for row in result["peers"].values():
        assert row["gflops_per_s"] > 0 and 0 < row["mfu"] < 1.5
    assert result["peers"]["turbo"]["max_rel_loss_diff"] < 1e-5
    assert "MFU" in (tmp_path / "bench.md").read_text() and "GPT-2 causal LM" in (tmp_path / "bench.md").read_text()
