"""Decoder shapes for `turbotrain bench --task sft --shape NAME`, from the published `config.json` of each
model: the fields that decide a training step's work and memory, built with random weights (nothing
downloaded; `AutoModelForCausalLM.from_config`).

| shape | published config | hidden | layers | heads / kv heads | head dim | FFN | vocabulary | also |
|---|---|---|---|---|---|---|---|---|
| gemma3-270m | google/gemma-3-270m | 640 | 18 | 4 / 1 | 256 | 2,048 | 262,144 | sliding window 512 on 5 of every 6 layers; RoPE θ 10k local, 1M global; query scale 256; GELU-tanh |
| qwen2.5-0.5b | Qwen/Qwen2.5-0.5B | 896 | 24 | 14 / 2 | 64 | 4,864 | 151,936 | RoPE θ 1M; no sliding window (`use_sliding_window` false); q/k/v bias |
| llama3.2-1b | meta-llama/Llama-3.2-1B | 2,048 | 16 | 32 / 8 | 64 | 8,192 | 128,256 | RoPE θ 500k, llama3 scaling (factor 32, low 1, high 4, original 8,192) |
| qwen3-1.7b | Qwen/Qwen3-1.7B | 2,048 | 28 | 16 / 8 | 128 | 6,144 | 151,936 | RoPE θ 1M; q/k RMSNorm |

All four tie the output head to the input embedding (`--untied` unties it). Token ids are the benchmark
tokenizer's (bos 0, pad 1, eos 2), not the published ones: the rows come from the built-in corpus.
`small` (the sft workload's default) is its own Qwen2 layout: hidden 256, 4 layers, 4 heads, half of them
key/value heads, FFN 4 x hidden, vocabulary 50,265, positions up to `--seq-len`.
`--hidden-size`, `--layers`, `--heads` and `--vocab-size` override a shape's value (`--layers 1` makes a
quick check of a large shape; the other fields stay the published ones).
"""

from __future__ import annotations

from transformers import CONFIG_MAPPING, PretrainedConfig

TOKEN_IDS = {"bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2}
PUBLISHED: dict[str, dict] = {
    "gemma3-270m": {
        "model_type": "gemma3_text",
        "hidden_size": 640,
        "num_hidden_layers": 18,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "intermediate_size": 2048,
        "vocab_size": 262_144,
        "max_position_embeddings": 32_768,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10_000.0,
        "query_pre_attn_scalar": 256,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
    },
    "qwen2.5-0.5b": {
        "model_type": "qwen2",
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "vocab_size": 151_936,
        "max_position_embeddings": 32_768,
        "rope_theta": 1_000_000.0,
        "use_sliding_window": False,
        "sliding_window": 32_768,
        "max_window_layers": 24,
        "rms_norm_eps": 1e-6,
    },
    "llama3.2-1b": {
        "model_type": "llama",
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 8192,
        "vocab_size": 128_256,
        "max_position_embeddings": 131_072,
        "rope_theta": 500_000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "rms_norm_eps": 1e-5,
    },
    "qwen3-1.7b": {
        "model_type": "qwen3",
        "hidden_size": 2048,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 6144,
        "vocab_size": 151_936,
        "max_position_embeddings": 40_960,
        "rope_theta": 1_000_000.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": 28,
        "rms_norm_eps": 1e-6,
    },
}
SHAPES = ("small", *PUBLISHED)


def small_shape(hidden_size: int, num_heads: int, seq_len: int) -> dict:
    """The sft workload's own layout: Qwen2, half the heads as key/value heads, FFN 4 x hidden."""
    return {
        "model_type": "qwen2",
        "hidden_size": hidden_size,
        "num_hidden_layers": 4,
        "num_attention_heads": num_heads,
        "num_key_value_heads": max(1, num_heads // 2),
        "intermediate_size": 4 * hidden_size,
        "vocab_size": 50265,
        "max_position_embeddings": seq_len,
    }


def shape_config(name: str, *, seq_len: int, overrides: dict, untied: bool, dropout: float) -> PretrainedConfig:
    """The Transformers config of shape `name` with `overrides` (config field -> value) applied."""
    if name not in SHAPES:
        raise ValueError(f"unknown shape '{name}'; choose from {', '.join(SHAPES)}")
    if name == "small":
        base = small_shape(overrides.get("hidden_size", 256), overrides.get("num_attention_heads", 4), seq_len)
    else:
        base = dict(PUBLISHED[name])
    fields = {**base, **overrides, **TOKEN_IDS, "tie_word_embeddings": not untied, "attention_dropout": dropout}
    return CONFIG_MAPPING[fields.pop("model_type")](**fields)
