"""The bench runs its peers interleaved and reports medians, ratios and loss differences."""

from __future__ import annotations

import json

import pytest

from tests.bench.tiny import tiny_workload
from turbotrain.bench.runner import PeerRuns, interleaved_order, loss_difference, run_bench
from turbotrain.bench.workload import Workload
from turbotrain.utils.imports import is_available


def test_interleaved_order_is_a_b_c_a_b_c():
    assert interleaved_order(("stock", "compiled", "turbo"), 2) == [
        (0, "stock"),
        (0, "compiled"),
        (0, "turbo"),
        (1, "stock"),
        (1, "compiled"),
        (1, "turbo"),
    ]


def test_loss_difference_is_the_largest_step_gap():
    stock = PeerRuns("stock", losses=[[2.0, 1.0]])
    other = PeerRuns("turbo", losses=[[2.0, 1.1]])
    absolute, relative = loss_difference(other, stock)
    assert absolute == pytest.approx(0.1) and relative == pytest.approx(0.1)


def test_unknown_peer_is_rejected():
    with pytest.raises(ValueError, match="unknown peers"):
        Workload(peers=("stock", "fast"))


@pytest.mark.slow
def test_tiny_bench_writes_json_and_markdown(tmp_path):
    workload = tiny_workload(rounds=2)
    result = run_bench(workload, out_dir=tmp_path)
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert set(saved["peers"]) == {"stock", "turbo"}
    turbo = saved["peers"]["turbo"]
    assert turbo["tokens_per_s"] > 0 and turbo["ratio_to_stock"] > 0
    assert turbo["max_rel_loss_diff"] < 1e-4  # same losses as stock, step by step
    assert "| turbo | auto: eager |" in (tmp_path / "bench.md").read_text()  # 3 steps: too short to measure
    png = tmp_path / "bench.png"
    assert not is_available("matplotlib") or png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result["peers"]["stock"]["ratio_to_stock"] == 1.0


def test_turbo_off_reaches_the_turbo_peer_and_the_command(tmp_path):
    from turbotrain.bench.peers import build_trainer
    from turbotrain.data import MaskedLMData

    workload = Workload(hidden_size=32, num_layers=1, num_heads=2, vocab_size=500, turbo_off=("label_sparsity",))
    assert workload.command() == (
        "turbotrain bench --hidden-size 32 --layers 1 --heads 2 --vocab-size 500 --turbo-off label_sparsity"
    )
    data = MaskedLMData(train=None, eval=None, collator=None, num_tokens=0)
    trainer = build_trainer("turbo", workload, workload.initial_model(), data, None, str(tmp_path))
    assert trainer.args.label_sparsity is False and "label_sparsity" not in trainer.turbo_report.applied
    with pytest.raises(ValueError, match="unknown passes"):
        Workload(turbo_off=("warp_drive",))


def test_turbo_off_sets_each_pass_to_its_own_off_value(tmp_path):
    from turbotrain.bench.peers import build_trainer
    from turbotrain.data import MaskedLMData

    workload = Workload(hidden_size=32, num_layers=1, num_heads=2, vocab_size=500, turbo_off=("chunked_cross_entropy",))
    data = MaskedLMData(train=None, eval=None, collator=None, num_tokens=0)
    trainer = build_trainer("turbo", workload, workload.initial_model(), data, None, str(tmp_path))
    assert trainer.args.chunked_cross_entropy == "never" and trainer.args.label_sparsity is True


@pytest.mark.slow
def test_tiny_variable_length_bench_packs_and_matches_stock(tmp_path):
    workload = tiny_workload(seq_len=64, vocab_size=2000, batch_size=8, lengths="variable", task="cls")
    result = run_bench(workload, out_dir=tmp_path)
    assert 0.2 < result["padding_share"] < 0.9 and result["length_histogram"]
    assert "padding_free" in result["peers"]["turbo"]["passes"] and result["peers"]["stock"]["passes"] == []
    assert result["peers"]["turbo"]["max_rel_loss_diff"] < 1e-5  # dropout 0: packed == padded, step by step
    assert "Padding share" in (tmp_path / "bench.md").read_text()


def test_backend_lines_mention_eager_fallbacks_only_for_backends_that_report_them():
    from turbotrain.bench.report import _data_lines

    peers = {
        "turbo:onnxruntime": {"backend": "onnxruntime", "backend_report": {"graphs": 7, "fallbacks": []}},
        "turbo:xla": {"backend": "xla", "backend_report": {"devices": 4, "compiles": 1}},
    }
    ort, xla = _data_lines({"peers": peers})
    assert ort == "turbo:onnxruntime (onnxruntime): graphs 7; graphs falling back to eager: 0."
    assert xla == "turbo:xla (xla): devices 4, compiles 1."


def test_peer_names_carry_backend_and_options():
    from turbotrain.bench.peers import peer_backend

    assert peer_backend("turbo", "auto") == ("auto", None)
    assert peer_backend("turbo:inductor", "auto") == ("inductor", None)
    assert peer_backend("turbo:inductor:scope=blocks", "auto") == ("inductor", {"scope": "blocks"})
    assert peer_backend("turbo:auto:min_steps=0,scope=blocks", "x") == ("auto", {"min_steps": 0, "scope": "blocks"})
