"""The dpo workload: preference pairs of the asked lengths, TRL's DPOTrainer and turbo's, the peers' guards."""

from __future__ import annotations

import json

import pytest

from tests.bench.tiny import SCHEDULE, SIZES
from turbotrain.bench.runner import run_bench
from turbotrain.bench.workloads import make_workload
from turbotrain.data.preference import build_preference_pairs, length_summary, pair_lengths

pytestmark = pytest.mark.requires_llm
TINY = {**SIZES, **SCHEDULE, "vocab_size": 3000, "pairs": 16, "prompt_tokens": (6, 20), "completion_tokens": (3, 9)}


def test_pair_lengths_are_uniform_in_their_inclusive_ranges():
    lengths = pair_lengths(400, (30, 200), (20, 120), seed=0)
    prompts, completions = [p for p, _, _ in lengths], [c for _, *pair in lengths for c in pair]
    assert (min(prompts), max(prompts)) == (30, 200) and 100 < sorted(prompts)[200] < 130
    assert (min(completions), max(completions)) == (20, 120)
    assert lengths == pair_lengths(400, (30, 200), (20, 120), seed=0)


def test_pairs_are_text_of_about_the_drawn_lengths():
    from turbotrain.data import stdlib_corpus, train_tokenizer

    tokenizer = train_tokenizer(stdlib_corpus(), 3000)
    pairs = build_preference_pairs(tokenizer, 32, (30, 60), (10, 20))
    summary = length_summary(tokenizer, pairs)
    assert 25 <= summary["prompt"]["min"] and summary["prompt"]["max"] <= 66  # a BPE merge or split at the edges
    assert 7 <= summary["completion"]["min"] and summary["completion"]["max"] <= 24
    assert list(pairs["chosen"]) != list(pairs["rejected"])


def test_dpo_peers_and_lengths_are_checked():
    assert make_workload("dpo").peers == ("stock", "turbo")
    with pytest.raises(ValueError, match="unknown peers"):
        make_workload("dpo", peers=("stock", "trl"))
    with pytest.raises(ValueError, match="no 'compiled' peer"):
        make_workload("dpo", peers=("stock", "compiled"))
    with pytest.raises(ValueError, match="fewest first"):
        make_workload("dpo", prompt_tokens=(200, 30))


def test_the_liger_peer_names_the_package_it_needs(monkeypatch):
    from turbotrain.bench.workloads import dpo

    monkeypatch.setattr(dpo, "is_available", lambda package: False)
    with pytest.raises(ValueError, match="liger-kernel"):
        make_workload("dpo", peers=("stock", "liger"))


def test_trl_s_padding_free_peer_is_an_error_where_trl_turns_it_off(tmp_path):
    # TRL 1.16 sets DPOTrainer.padding_free back to False in __init__: the peer must not measure stock again
    workload = make_workload("dpo", **{**TINY, "peers": ("stock", "trl-padding-free")})
    try:
        peer = workload.trainer("trl-padding-free", workload.model(), workload.data(), _Counter(), str(tmp_path))
    except RuntimeError as error:
        assert "turned DPOConfig(padding_free=True) off" in str(error)
        return
    assert peer.trainer.padding_free  # a TRL that keeps it: the peer runs TRL's padding-free


class _Counter:
    def wrap(self, inner):
        return inner


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_tiny_dpo_bench_gives_stock_losses_for_turbo(tmp_path, lora):
    workload = make_workload("dpo", **TINY, lora=lora)
    run_bench(workload, out_dir=tmp_path)
    saved = json.loads((tmp_path / "bench.json").read_text())
    peers = saved["peers"]
    assert peers["turbo"]["max_rel_loss_diff"] < 1e-5
    assert "label_sparsity" in peers["turbo"]["passes"] and peers["stock"]["peak_memory_mb"] > 0
    assert peers["turbo"]["memory_at_start_mb"] > 0
    assert saved["title"].startswith("DPO Qwen2-shaped, " + ("LoRA" if lora else "full fine-tune"))
    assert saved["pair_lengths"]["prompt"]["max"] <= 26 and saved["command"].startswith("turbotrain bench --task dpo")


def test_gradient_checkpointing_is_asked_of_every_peer(tmp_path):
    workload = make_workload("dpo", **{**TINY, "gradient_checkpointing": True})
    for peer in ("stock", "turbo"):
        built = workload.trainer(peer, workload.model(), workload.data(), _Counter(), str(tmp_path / peer))
        assert built.trainer.args.gradient_checkpointing, peer
    assert not make_workload("dpo", **TINY).gradient_checkpointing  # off unless asked (TRL's default is on)
