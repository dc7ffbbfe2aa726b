"""The one runner: peers interleaved, medians, ratios to the reference, loss differences, one report writer."""

from __future__ import annotations

import json

import pytest
import torch

from tests.bench.tiny import tiny_workload
from turbotrain.bench.counting import BatchCounter, count_batch
from turbotrain.bench.runner import PeerRuns, Segment, interleaved_order, loss_difference, run_bench
from turbotrain.bench.workload import BenchData
from turbotrain.utils.imports import is_available


def runs(name: str, *losses: list[float]) -> PeerRuns:
    return PeerRuns(name, segments=[Segment([1.0] * len(lo), lo, [], (False, False)) for lo in losses])


def test_interleaved_order_is_a_b_c_a_b_c():
    assert interleaved_order(("stock", "compiled", "turbo"), 2) == [
        (0, "stock"),
        (0, "compiled"),
        (0, "turbo"),
        (1, "stock"),
        (1, "compiled"),
        (1, "turbo"),
    ]


def test_loss_difference_is_the_largest_step_gap_over_every_round():
    absolute, relative = loss_difference(runs("turbo", [2.0, 1.0], [3.0, 2.2]), runs("stock", [2.0, 1.0], [3.0, 2.0]))
    assert absolute == pytest.approx(0.2) and relative == pytest.approx(0.1)
    assert loss_difference(runs("a", [0.0]), runs("b", [0.0])) == (0.0, 0.0)  # a zero loss is no error


def test_unknown_peer_and_pass_are_rejected():
    with pytest.raises(ValueError, match="unknown peers"):
        tiny_workload(peers=("stock", "fast"))
    with pytest.raises(ValueError, match="unknown passes"):
        tiny_workload(turbo_off=("warp_drive",))
    with pytest.raises(ValueError, match="takes no"):
        tiny_workload(channels=(8,))


def test_batch_counts_are_real_tokens_slots_labels_and_rows():
    import torch

    batch = {
        "input_ids": torch.zeros(2, 4, dtype=torch.long),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]),
        "labels": torch.tensor([[-100, 5, -100, 6], [7, -100, -100, -100]]),
    }
    count = count_batch(batch)
    assert (count.rows, count.tokens, count.slots, count.label_tokens, count.label_slots) == (2, 6, 8, 3, 8)
    assert count.units("tokens") == 6 and count.units("label tokens") == 3 and count.units("examples") == 2
    features = {"input_features": torch.zeros(3, 80, 10), "labels": torch.tensor([[1, -100], [2, 3], [4, 5]])}
    assert count_batch(features).rows == 3 and count_batch(features).tokens == 0  # speech: no input ids


@pytest.mark.slow
def test_tiny_bench_writes_json_and_markdown(tmp_path):
    workload = tiny_workload(rounds=2)
    result = run_bench(workload, out_dir=tmp_path)
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert set(saved["peers"]) == {"stock", "turbo"} and saved["reference"] == "stock"
    assert saved["initial_model_resident"] is False  # peers load their copies: no extra model in any peak
    turbo = saved["peers"]["turbo"]
    assert turbo["tokens_per_s"] > 0 and turbo["ratio"] > 0
    assert turbo["max_rel_loss_diff"] < 1e-4  # same losses as stock, step by step
    markdown = (tmp_path / "bench.md").read_text()
    assert "| turbo | auto: eager |" in markdown  # 3 steps: too short to measure
    assert "| peer | peak MB | weights | gradients | optimizer | logits | activations |" in markdown
    split = turbo["memory_split_mb"]
    assert split["weights_mb"] > 0 and split["gradients_mb"] == split["weights_mb"] and split["optimizer_mb"] > 0
    assert saved["peers"]["stock"]["memory_split_mb"]["logits_mb"] > split["logits_mb"]  # label sparsity's kept rows
    png = tmp_path / "bench.png"
    assert not is_available("matplotlib") or png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result["peers"]["stock"]["ratio"] == 1.0


def test_turbo_off_reaches_the_turbo_peer_and_the_command(tmp_path):
    workload = tiny_workload(vocab_size=500, turbo_off=("label_sparsity",), peers=("stock", "compiled", "turbo"))
    assert workload.command() == (
        "turbotrain bench --task mlm --hidden-size 32 --layers 1 --heads 2 --seq-len 32 --vocab-size 500 "
        "--batch-size 4 --rounds 1 --steps 2 --turbo-off label_sparsity"
    )
    data = BenchData(train=None, collator=None)
    trainer = workload.build_trainer("turbo", workload.model(), data, BatchCounter(), str(tmp_path))
    assert trainer.args.label_sparsity is False and "label_sparsity" not in trainer.turbo_report.applied


def test_turbo_off_sets_each_pass_to_its_own_off_value(tmp_path):
    workload = tiny_workload(vocab_size=500, turbo_off=("chunked_cross_entropy",))
    data = BenchData(train=None, collator=None)
    trainer = workload.build_trainer("turbo", workload.model(), data, BatchCounter(), str(tmp_path))
    assert trainer.args.chunked_cross_entropy == "never" and trainer.args.label_sparsity is True


@pytest.mark.slow
def test_tiny_variable_length_bench_packs_and_matches_stock(tmp_path):
    workload = tiny_workload("cls", seq_len=64, vocab_size=2000, batch_size=8)
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


def test_ratio_pairs_each_step_with_the_reference_on_the_same_batch():
    from turbotrain.bench.counting import BatchCount
    from turbotrain.bench.runner import PeerRuns, Segment, paired_speedup

    counts = [BatchCount(2, tokens, tokens, 0, 0) for tokens in (10, 10, 400, 400, 400)]  # small and large batches

    def runs(seconds):
        return PeerRuns("p", [Segment([1.0, *seconds], [0.0] * 5, [counts[0], *counts], (False, False))])

    stock, turbo = runs([0.1, 0.1, 4.0, 4.0, 4.0]), runs([0.2, 0.2, 2.0, 2.0, 2.0])
    # paired per-step speedups 0.5, 0.5, 2, 2, 2: median 2; throughput is all units over all seconds
    assert paired_speedup(turbo, stock, warmup=1) == 2.0
    assert turbo.throughput(1, "tokens") == 1220 / 6.4 and stock.step_seconds(1) == [0.1, 0.1, 4.0, 4.0, 4.0]


def test_the_pairing_stays_within_each_round_when_a_round_is_shorter():
    from turbotrain.bench.runner import PeerRuns, Segment, paired_speedup

    def runs(*rounds):
        return PeerRuns("p", [Segment([9.0, *seconds], [], [], (False, False)) for seconds in rounds])

    stock = runs([1.0, 1.0], [8.0, 8.0, 8.0])
    turbo = runs([0.5], [4.0, 4.0, 4.0])  # round 1 ended early: its one step pairs with round 1's first
    assert paired_speedup(turbo, stock, warmup=1) == 2.0  # flattened, 0.5 s would have met 1.0 and 4.0 met 1.0


def test_work_ratio_pairs_each_steps_executed_flops_with_the_reference():
    from turbotrain.bench.runner import PeerRuns, Segment, paired_work_ratio
    from turbotrain.measure.flops import ModelFlops, batch_work, step_flops

    model = ModelFlops(body_params=1_000_000, head_params=500_000, layers=2, hidden=64)
    ids = torch.ones(2, 8, dtype=torch.long)
    mask = torch.tensor([[1] * 8, [1] * 3 + [0] * 5])  # 5 of 16 positions padding
    labels = torch.full((2, 8), -100)
    labels[:, 6:] = 1
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    flags = [(p, s) for p in (False, True) for s in (False, True)]
    count = count_batch(batch, {f: batch_work(batch, packed=f[0], sparse_head=f[1], causal=True) for f in flags})

    def runs(executed):
        return PeerRuns("p", [Segment([1.0, 1.0], [0.0, 0.0], [count, count], executed)])

    expected = step_flops(model, count.work[(False, False)]) / step_flops(model, count.work[(True, True)])
    assert expected > 1
    assert paired_work_ratio(runs((True, True)), runs((False, False)), warmup=1, model=model) == expected
    assert paired_work_ratio(runs((False, False)), runs((False, False)), warmup=1, model=model) == 1.0
