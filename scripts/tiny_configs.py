"""Tiny configs of any Transformers family, made generically from its default config: no download, no dropout.

`tiny_config(model_type, halve=False)` takes `AutoConfig.for_model(model_type)` and shrinks it, and every
config inside it (`text_config`, `vision_config`, `audio_config`, `backbone_config`, an encoder-decoder's
two halves...):
* text sizes (SIZES): hidden 32, 2 layers, 4 heads, 2 kv heads, head_dim 8, FFN 64, vocabulary 1,000,
  128 positions, 4 experts (an int attribute above the value is set to it);
* vision and audio sizes (MEDIA_SIZES): images 32 x 32, 4 video frames, 32 encoder positions of speech,
  16-tap positional convolutions, 64 spectrogram frames (AST), attention windows of 2 x 2 patches; stage lists (`depths`) 1 block each, stage widths (`hidden_sizes`,
  `conv_dim`) divided by one power of two until the widest is at most 64 (ratios kept, so a stage's heads
  still divide it);
* every float that draws at random in training set to 0: dropout, layer drop, drop path, SpecAugment's
  `mask_time_prob` / `mask_feature_prob`;
* backbones from Transformers' own classes, not timm (a timm backbone config becomes a tiny ResNet's), without
  pretrained weights;
* sizes derived from others kept so (Swin's `hidden_size`, the last stage's width);
* every window and chunk option below the text examples' lengths (3..24 tokens: sliding windows 4,
  ModernBERT's local band 8, chunks 8, local windows 4), and a `layer_types` that mixes kinds keeps one
  layer of each of its first kinds, so the paths where layers differ run (a tiny config whose windows
  outlast every sequence hid padding-free's sliding-window bug); Qwen2-style configs turn their sliding
  window on (`use_sliding_window`, one full layer first).

`halve=True` is the second try for a family whose sizes must divide each other in ways the clamp breaks
(Swin's 3 heads on a width of 32): every text size above its target is halved until it is at most the
target, instead of set to it (Swin: width 96 -> 24, 3 heads divide it); media sizes are clamped still.
"""

from __future__ import annotations

import inspect

from transformers import AutoConfig, PretrainedConfig
from transformers.models.auto import configuration_auto

VOCAB = 1000
NUM_LABELS = 3
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, POSITIONS = 32, 2, 4, 2, 8, 64, 128
IMAGE, FRAMES, SPEECH_POSITIONS, SPECTROGRAM_FRAMES = 32, 4, 32, 64

LAYER_NAMES = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers")
FFN_NAMES = ("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner")
MOE_FFN_NAMES = ("ffn_hidden_size", "moe_intermediate_size", "shared_expert_intermediate_size")
SIZES = (  # (value, attribute names): an int attribute larger than value is set to value
    (HIDDEN, ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "embedding_size", "d_embed")),
    (HIDDEN, ("encoder_hidden_size", "vision_hidden_size", "text_hidden_size")),  # one tower's width in another
    (LAYERS, (*LAYER_NAMES, "num_decoder_layers")),
    (HEADS, ("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads")),
    (KV_HEADS, ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num")),
    (HEAD_DIM, ("head_dim", "d_kv", "kv_channels", "qk_rope_head_dim", "v_head_dim", "qk_nope_head_dim", "rotary_dim")),
    (FFN, (*FFN_NAMES, *MOE_FFN_NAMES, "expert_intermediate_size")),
    (POSITIONS, ("max_position_embeddings", "n_positions", "max_positions", "n_ctx", "max_seq_len")),
    (VOCAB, ("vocab_size",)),
    (4, ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")),
    (2, ("num_experts_per_tok", "num_selected_experts", "moe_topk", "top_k")),
)
MEDIA_SIZES = (  # the same rule for image, video and speech sizes (ints, or each element of a list)
    (IMAGE, ("image_size", "img_size", "crop_size")),
    (FRAMES, ("num_frames",)),
    (SPEECH_POSITIONS, ("max_source_positions",)),
    (16, ("num_conv_pos_embeddings",)),
    (2, ("window_size",)),  # Swin-style windows of 2 x 2 patches (as Transformers' own Swin tests)
)
KNOWN_NAMES = {name for _, names in (*SIZES, *MEDIA_SIZES) for name in names}
STAGE_DEPTHS = ("depths", "encoder_depths", "decoder_depths", "num_blocks")  # per stage: 1 block each
STAGE_WIDTHS = ("hidden_sizes", "embed_dims", "conv_dim", "neck_hidden_sizes", "embedding_dims", "channels")
WIDEST_STAGE = 64
RANDOM_RATES = ("dropout", "pdrop", "drop", "mask_time_prob", "mask_feature_prob")  # floats set to 0


class Skip(Exception):
    """The model cannot be built tiny, or needs inputs this builder cannot make."""


def _smaller(current: int, target: int, halve: bool) -> int:
    if current <= target:
        return current
    if not halve:
        return target
    while current > target and current % 2 == 0:
        current //= 2
    return min(current, target) if current > target else current


def _shrink_int(config, name: str, target: int, halve: bool) -> None:
    current = getattr(config, name, None)
    if isinstance(current, int) and not isinstance(current, bool):
        setattr(config, name, _smaller(current, target, halve))
    elif isinstance(current, (list, tuple)) and current and all(type(v) is int for v in current):
        setattr(config, name, type(current)(_smaller(v, target, halve) for v in current))


def _shrink_stages(config) -> None:
    for name in STAGE_DEPTHS:
        current = getattr(config, name, None)
        if isinstance(current, (list, tuple)) and current and all(type(v) is int for v in current):
            setattr(config, name, type(current)(min(v, 1) for v in current))
    for name in STAGE_WIDTHS:
        current = getattr(config, name, None)
        if isinstance(current, (list, tuple)) and current and all(type(v) is int and v > 0 for v in current):
            factor = 1
            while max(current) // factor > WIDEST_STAGE and all(v % (2 * factor) == 0 for v in current):
                factor *= 2
            setattr(config, name, type(current)(v // factor for v in current))


# window and chunk options, each set to this size where the default is larger (all below the 3..24-token examples)
WINDOWS = (("local_attention", 8), ("sliding_window", 4), ("attention_chunk_size", 8), ("window_size", 4))
SLIDING_ON = dict(use_sliding_window=True, max_window_layers=1)  # Qwen2-style configs: windows off by default


def _layer_types(kinds: list, layers: int) -> list:
    """`layers` layer kinds: the first `layers` kinds, or one of each of the first distinct kinds if they mix."""
    distinct = list(dict.fromkeys(kinds))
    return distinct[:layers] + kinds[len(distinct[:layers]) : layers] if len(distinct) > 1 else kinds[:layers]


def _shrink_windows(config) -> None:
    for name, size in WINDOWS:
        current = getattr(config, name, None)
        if isinstance(current, int) and not isinstance(current, bool) and current > size:
            setattr(config, name, size)


def _zero_random_rates(config) -> None:
    for name, current in list(vars(config).items()):
        if isinstance(current, float) and any(word in name for word in RANDOM_RATES):
            setattr(config, name, 0.0)
        if name == "layer_types" and isinstance(current, list):
            setattr(config, name, _layer_types(current, getattr(config, "num_hidden_layers", LAYERS)))


def _fix_token_ids(config) -> None:
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id"):
        current = getattr(config, name, None)
        if isinstance(current, int) and current >= VOCAB:
            setattr(config, name, 1)
    if getattr(config, "pad_token_id", 0) is None:
        config.pad_token_id = 0
    if getattr(config, "is_encoder_decoder", False) and getattr(config, "decoder_start_token_id", None) is None:
        config.decoder_start_token_id = getattr(config, "pad_token_id", None)  # DETR: neither


def shrink(config, halve: bool = False, depth: int = 0) -> None:
    """Shrink `config` and every config inside it, in place. An alias (`attribute_map`) is shrunk only where it
    names a size this knows (GPT-2's `num_hidden_layers` is `n_layer`; ConvNeXt's is `num_stages`, kept)."""
    aliases = getattr(config, "attribute_map", {}) or {}
    last_stage = _last_stage_width(config)
    for sizes, halving in ((SIZES, halve), (MEDIA_SIZES, False)):  # images stay 32 x 32 (28 would not tile)
        for value, names in sizes:
            for name in names:
                if aliases.get(name, name) in KNOWN_NAMES:
                    _shrink_int(config, name, value, halving)
    _shrink_stages(config)
    if last_stage:  # Swin: hidden_size is the last stage's width, embed_dim x 2 ^ (stages - 1)
        config.hidden_size = config.embed_dim * 2 ** (len(config.depths) - 1)
    if isinstance(getattr(config, "num_mel_bins", None), int) and isinstance(getattr(config, "max_length", None), int):
        config.max_length = min(config.max_length, SPECTROGRAM_FRAMES)  # AST's spectrogram frames
    _zero_random_rates(config)
    _shrink_windows(config)
    _fix_token_ids(config)
    if depth < 3:
        for name, inner in list(vars(config).items()):
            if getattr(inner, "model_type", None) == "timm_backbone":  # timm is not a dependency: a ResNet
                inner = AutoConfig.for_model("resnet", out_indices=list(inner.out_indices or [1, 2, 3, 4]))
                setattr(config, name, inner)
            if isinstance(inner, PretrainedConfig) and inner is not config:
                shrink(inner, halve, depth + 1)


def _last_stage_width(config) -> bool:
    embed, depths, hidden = (getattr(config, n, None) for n in ("embed_dim", "depths", "hidden_size"))
    if not (isinstance(embed, int) and isinstance(depths, (list, tuple)) and isinstance(hidden, int)):
        return False
    return len(depths) > 1 and hidden == embed * 2 ** (len(depths) - 1)


def _no_timm_no_weights(model_type: str) -> dict:
    """Options of the family's config class that keep its backbone in Transformers, randomly initialised."""
    config_class = configuration_auto.CONFIG_MAPPING[model_type]
    accepted = inspect.signature(config_class.__init__).parameters
    wanted = {"use_timm_backbone": False, "use_pretrained_backbone": False}
    return {name: value for name, value in wanted.items() if name in accepted}


def tiny_config(model_type: str, halve: bool = False):
    """The family's default config, shrunk (see the module docstring); raises Skip if it cannot be built."""
    try:
        config = AutoConfig.for_model(model_type, **_no_timm_no_weights(model_type))
        if hasattr(config, "use_sliding_window"):
            config = AutoConfig.for_model(model_type, **_no_timm_no_weights(model_type), **SLIDING_ON)
    except Exception as error:
        raise Skip(f"no config: {type(error).__name__}") from error
    try:
        shrink(config, halve)
    except Exception as error:  # a per-layer (heterogeneous) config refuses global size attributes
        raise Skip(f"shrink failed: {type(error).__name__}") from error
    config.num_labels = NUM_LABELS
    config.classifier_dropout = 0.0  # heads that default to 0.1 when the config has none (GPT-2's, Llama's)
    return config
