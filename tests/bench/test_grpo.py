"""The grpo workload: TRL's GRPOTrainer and turbo's on the same prompts, the optimisation part of each step timed
apart from generation, losses compared only over steps whose completions are equal."""

from __future__ import annotations

import json

import pytest

from tests.bench.tiny import SCHEDULE, SIZES
from turbotrain.bench.runner import PeerRuns, Segment, loss_difference, run_bench, step_pairs
from turbotrain.bench.workloads import grpo, make_workload

pytestmark = pytest.mark.requires_llm
TINY = {**SIZES, **SCHEDULE, "vocab_size": 3000, "prompts": 8, "prompt_tokens": (6, 20), "max_completion_length": 8}


def test_grpo_peers_and_sizes_are_checked():
    workload = make_workload("grpo")
    assert workload.peers == ("stock", "turbo") and workload.apart == "generation"
    with pytest.raises(ValueError, match="no 'compiled' peer"):
        make_workload("grpo", peers=("stock", "compiled"))
    with pytest.raises(ValueError, match="multiple of --num-generations"):
        make_workload("grpo", batch_size=6, num_generations=4)
    with pytest.raises(ValueError, match="fewest first"):
        make_workload("grpo", prompt_tokens=(200, 30))


def _runs(name: str, losses: list[float], keys: list[str]) -> PeerRuns:
    return PeerRuns(name, [Segment([1.0] * len(losses), losses, [], (False, False), batch_keys=keys)])


def test_losses_are_compared_only_where_the_batches_are_equal():
    stock = _runs("stock", [1.0, 2.0, 3.0], ["a", "b", "c"])
    other = _runs("turbo", [1.0, 9.0, 3.3], ["a", "x", "c"])
    pairs, unequal = step_pairs(other, stock)
    assert pairs == [(1.0, 1.0), (3.3, 3.0)] and unequal == 1
    assert loss_difference(other, stock) == pytest.approx((0.3, 0.1))


def test_the_optimisation_part_excludes_generation_and_turbo_gives_stock_losses(tmp_path, monkeypatch):
    digests = []
    real_digest = grpo.step_digest
    monkeypatch.setattr(grpo, "step_digest", lambda *ids: digests.append(real_digest(*ids)) or digests[-1])
    workload = make_workload("grpo", **TINY)
    run_bench(workload, out_dir=tmp_path)
    saved = json.loads((tmp_path / "bench.json").read_text())
    stock, fast = saved["peers"]["stock"], saved["peers"]["turbo"]
    steps = SCHEDULE["warmup"] + SCHEDULE["steps"]
    # one generation per step, stock's first: the same prompts and completions in both peers
    assert len(digests) == 2 * steps and digests[:steps] == digests[steps:]
    assert fast["unequal_batches"] == 0 and fast["max_rel_loss_diff"] < 1e-5
    assert "chunked_cross_entropy" in fast["passes"] and not stock["passes"]
    for row in (stock, fast):
        assert len(row["step_s"]) == len(row["apart_step_s"]) == SCHEDULE["steps"]
        assert all(seconds > 0 for seconds in row["step_s"] + row["apart_step_s"])
        assert row["tokens_per_s"] > 0 and row["peak_memory_mb"] > 0 and row["ratio"] > 0
    assert saved["apart"] == "generation" and saved["command"].startswith("turbotrain bench --task grpo")
    assert saved["title"].startswith("GRPO Qwen2-shaped, full fine-tune, reference model on")
    assert "Generation, timed apart" in (tmp_path / "bench.md").read_text()
