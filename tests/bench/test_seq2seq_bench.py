"""The seq2seq benchmark runs end to end on a tiny BART-shaped model and reports what it measured."""

from __future__ import annotations

import json

from turbotrain.bench.seq2seq import Seq2SeqBench, run_seq2seq_bench


def test_bart_workload_reports_ratios_and_equal_losses(tmp_path):
    bench = Seq2SeqBench(
        workload="bart",
        hidden_size=32,
        layers=1,
        heads=2,
        batch_size=4,
        examples=16,
        source_len=32,
        target_len=16,
        rounds=1,
        steps=2,
        warmup=0,
    )
    result = run_seq2seq_bench(bench, out_dir=str(tmp_path))
    stock, turbo = result["peers"]["stock"], result["peers"]["turbo"]
    assert "label_sparsity" in turbo["passes"] and stock["ratio_to_stock"] == 1.0
    assert turbo["max_rel_loss_diff"] <= 1e-5 and 0 < result["label_padding_share"] < 1
    assert json.loads((tmp_path / "seq2seq.json").read_text())["bench"]["workload"] == "bart"
    assert "| turbo |" in (tmp_path / "seq2seq.md").read_text()
    share = result["head_share"]
    assert 0 < share["head_sparse_ms"] and 0 < share["share"] < 1 and share["bound_sparse"] >= 0.5
