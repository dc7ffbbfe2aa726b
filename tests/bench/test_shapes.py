"""The sft shapes are the published models': their parameter counts (built on the meta device, no memory)
match the published ones, their windows and RoPE settings are the configs', and each trains at a tiny size."""

from __future__ import annotations

import pytest
import torch
from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

from tests.bench.tiny import tiny_workload
from turbotrain.bench.shapes import PUBLISHED, shape_config
from turbotrain.bench.workloads import make_workload

PUBLISHED_PARAMETERS = {  # the models' own counts (tied heads counted once)
    "gemma3-270m": 268_098_176,
    "qwen2.5-0.5b": 494_032_768,
    "llama3.2-1b": 1_235_814_400,
    "qwen3-1.7b": 1_720_574_976,
}


def config(name: str, **overrides):
    return shape_config(name, seq_len=128, overrides=overrides, untied=False, dropout=0.0)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shape_has_the_published_parameter_count(name):
    built = config(name)
    with torch.device("meta"):
        model = MODEL_FOR_CAUSAL_LM_MAPPING[type(built)](built)
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED_PARAMETERS[name]
    assert built.tie_word_embeddings and (built.pad_token_id, built.bos_token_id, built.eos_token_id) == (1, 0, 2)


def test_windows_and_rope_are_the_published_configs():
    gemma = config("gemma3-270m")
    assert gemma.sliding_window == 512 and gemma.layer_types[:6] == ["sliding_attention"] * 5 + ["full_attention"]
    assert gemma.rope_parameters["sliding_attention"]["rope_theta"] == 10_000.0
    assert gemma.rope_parameters["full_attention"]["rope_theta"] == 1_000_000.0
    llama = config("llama3.2-1b")
    assert llama.rope_parameters["rope_type"] == "llama3" and llama.rope_parameters["factor"] == 32.0
    assert config("qwen2.5-0.5b").sliding_window is None and config("qwen3-1.7b").head_dim == 128
    assert config("gemma3-270m", num_hidden_layers=7).layer_types[5:] == ["full_attention", "sliding_attention"]


def test_overrides_and_the_small_default():
    workload = make_workload("sft", shape="llama3.2-1b", num_layers=1, vocab_size=512, untied=True)
    built = workload.config()
    assert (built.num_hidden_layers, built.vocab_size, built.hidden_size) == (1, 512, 2048)
    assert not built.tie_word_embeddings and "--shape llama3.2-1b" in workload.command()
    small = make_workload("sft").config()
    assert (small.model_type, small.hidden_size, small.num_key_value_heads, small.intermediate_size) == (
        "qwen2",
        256,
        2,
        1024,
    )
    with pytest.raises(ValueError, match="unknown shape"):
        make_workload("sft", shape="gpt-5").config()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_each_shape_trains_one_tiny_round(name, tmp_path):
    """One layer, a 2,000-token vocabulary, the shape's other sizes: stock and turbo, same losses."""
    from turbotrain.bench.runner import run_bench

    workload = tiny_workload(
        "sft",
        shape=name,
        hidden_size=None,
        num_heads=None,
        num_layers=1,
        vocab_size=2000,
        seq_len=64,
        batch_size=2,
        steps=1,
    )
    result = run_bench(workload, out_dir=tmp_path)
    turbo = result["peers"]["turbo"]
    assert turbo["max_rel_loss_diff"] < 1e-4 and result["peers"]["stock"]["final_loss"] > 0, name
    assert f"SFT {name}" in (tmp_path / "bench.md").read_text()
