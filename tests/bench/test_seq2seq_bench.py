"""The seq2seq (BART) and asr (Whisper) workloads run end to end at a tiny size and report what they measured."""

from __future__ import annotations

import json

import pytest

from tests.bench.tiny import tiny_workload
from turbotrain.bench.runner import run_bench

TINY = dict(examples=16, source_len=32, target_len=16, steps=2, warmup=0)


def test_bart_workload_reports_ratios_equal_losses_and_the_head_share(tmp_path):
    result = run_bench(tiny_workload("seq2seq", **TINY), out_dir=str(tmp_path))
    stock, turbo = result["peers"]["stock"], result["peers"]["turbo"]
    assert "label_sparsity" in turbo["passes"] and stock["ratio"] == 1.0 and turbo["label_tokens_per_s"] > 0
    assert turbo["max_rel_loss_diff"] <= 1e-5 and 0 < result["padding_share"] < 1
    assert stock["mfu"] is None  # the FLOP formula is not an encoder-decoder's
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["task"] == "seq2seq" and saved["unit"] == "label tokens"
    markdown = (tmp_path / "bench.md").read_text()
    assert "| turbo | eager |" in markdown and "Label padding share" in markdown and "Head share" in markdown
    share = result["head_share"]
    # timings of a tiny model: their sizes are the benchmark's business; here only that each was measured
    assert 0 < share["head_sparse_ms"] and 0 < share["share"] and share["bound_sparse"] > 0


@pytest.mark.slow
@pytest.mark.requires_espeak
def test_asr_workload_trains_whisper_on_spoken_sentences(tmp_path):
    result = run_bench(tiny_workload("asr", window_s=2, freeze_encoder=True, **TINY), out_dir=str(tmp_path))
    assert result["peers"]["turbo"]["max_rel_loss_diff"] <= 1e-5
    assert "Whisper-shaped ASR, encoder frozen" in result["title"]
