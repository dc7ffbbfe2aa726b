"""The sft workload: chat-style rows from the standard library, completion-only labels, its peers."""

from __future__ import annotations

import json

import pytest

from tests.bench.tiny import tiny_workload
from turbotrain.bench.runner import run_bench
from turbotrain.bench.workloads import make_workload
from turbotrain.data.chat import build_sft_data, function_rows


def test_rows_are_signature_and_first_line_then_the_rest():
    rows = function_rows(20)
    assert len(rows) == 20
    for prompt, completion in rows:
        assert prompt.startswith("def ") and '"""' in prompt and completion.strip()


def test_labels_are_the_completion_and_both_forms_share_token_ids():
    from tests.llm.helpers import tokenizer

    data = build_sft_data(tokenizer(), max_len=40, max_rows=12)
    for ids, labels, mask in zip(data.train["input_ids"], data.train["labels"], data.trl_train["completion_mask"]):
        assert len(ids) == len(labels) == len(mask) <= 40
        assert labels == [t if m else -100 for t, m in zip(ids, mask)]
        assert mask[0] == 0 and 1 in mask
    assert data.train["input_ids"] == data.trl_train["input_ids"]


def test_sft_peers_are_checked_and_default_to_trainer_and_trl():
    with pytest.raises(ValueError, match="unknown peers"):
        tiny_workload("sft", peers=("stock", "dpo"))
    assert tiny_workload("sft", peers=("stock", "compiled")).peers == ("stock", "compiled")
    assert make_workload("sft").peers == ("stock", "trl", "trl+turbo", "turbo")


def test_trl_defaults_switch_keeps_trls_bf16_and_gradient_checkpointing(tmp_path):
    shared = tiny_workload("sft", peers=("stock", "trl")).trl_arguments(str(tmp_path))
    assert shared["gradient_checkpointing"] is False and shared["bf16"] is False
    workload = tiny_workload("sft", peers=("stock", "trl"), trl_defaults=True)
    defaults = workload.trl_arguments(str(tmp_path))
    assert "gradient_checkpointing" not in defaults and defaults["bf16"] is True  # TRL's own default stays on
    assert workload.common_arguments(str(tmp_path))["bf16"] is False  # the Trainer peers keep the run's dtype
    assert "--trl-defaults" in workload.command() and "TRL's defaults" in workload.title()


@pytest.mark.slow
@pytest.mark.requires_llm
def test_tiny_sft_bench_has_stock_losses_for_every_peer(tmp_path):
    workload = tiny_workload("sft", seq_len=48, lora=True, peers=("stock", "trl", "trl+turbo", "turbo"))
    run_bench(workload, out_dir=tmp_path)
    saved = json.loads((tmp_path / "bench.json").read_text())
    peers = saved["peers"]
    assert set(peers) == {"stock", "trl", "trl+turbo", "turbo"}
    for name, row in peers.items():
        assert row["max_rel_loss_diff"] < 1e-4, name
        assert row["mfu"] > 0 and row["memory_split_mb"]["optimizer_mb"] > 0, name
    assert "chunked_cross_entropy" in peers["trl+turbo"]["passes"]
    lora = peers["stock"]["memory_split_mb"]
    assert lora["gradients_mb"] < lora["weights_mb"] / 10  # the adapters train, the base is frozen
    assert saved["length_histogram"] and "SFT Qwen2-shaped, LoRA" in saved["title"]


def test_long_lengths_are_long_tailed_and_every_token_labelled():
    from tests.llm.helpers import tokenizer
    from turbotrain.data.long_rows import LONGEST, build_long_rows, long_tailed_lengths

    lengths = long_tailed_lengths(2000)
    assert max(lengths) == LONGEST and min(lengths) >= 16 and sorted(lengths)[1000] < 400  # median ~256
    data = build_long_rows(tokenizer(), rows=8)
    assert data.train["input_ids"] == data.train["labels"] == data.trl_train["input_ids"]
    assert tiny_workload("sft", lengths="long").config().max_position_embeddings >= LONGEST
    with pytest.raises(ValueError, match="lengths"):
        make_workload("sft", lengths="fixed")


def test_code_lengths_give_long_prompts_labelled_minus_100():
    # `--lengths code`: the issue-style rows (long prompts, a short labelled completion)
    code, chat = tiny_workload("sft", lengths="code", seq_len=256), tiny_workload("sft", seq_len=256)
    shares = []
    for workload in (code, chat):
        labels = workload.data().train["labels"][:200]
        shares.append(sum(t != -100 for row in labels for t in row) / sum(map(len, labels)))
    assert shares[0] < 0.5 < shares[1], shares
    assert "code-to-docstring" in code.title()


@pytest.mark.slow
def test_tiny_long_sft_bench_runs_turbo_against_stock_and_mask_packing(tmp_path):
    # `turbotrain bench --task sft --lengths long`, at a tiny size (never timed here)
    workload = tiny_workload("sft", lengths="long", steps=1, batch_size=2, peers=("stock", "turbo", "turbo-masks"))
    run_bench(workload, out_dir=tmp_path)
    saved = json.loads((tmp_path / "bench.json").read_text())
    peers = saved["peers"]
    assert set(peers) == {"stock", "turbo", "turbo-masks"}
    for name, row in peers.items():
        assert row["max_rel_loss_diff"] < 1e-4, name
    assert "padding_free" in peers["turbo"]["passes"] and "padding_free" in peers["turbo-masks"]["passes"]
    assert "long-tailed" in saved["title"]


def test_the_masks_peer_packs_with_masks_and_the_turbo_peer_with_packed_attention(tmp_path):
    from turbotrain.bench.counting import BatchCounter

    workload = tiny_workload("sft", lengths="long", batch_size=2, peers=("stock", "turbo", "turbo-masks"))
    model, data = workload.model(), workload.data()
    built = {
        peer: workload.trainer(peer, model, data, BatchCounter(), str(tmp_path / peer)).trainer
        for peer in ("turbo", "turbo-masks")
    }
    assert built["turbo-masks"].args.padding_free_attention == "masks"
    assert built["turbo"].args.padding_free_attention != "masks"
