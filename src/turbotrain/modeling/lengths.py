"""How long a sequence may be and what changes with its length: the position table, attention windows and
chunks, and rotary rules that depend on the longest position. Packing and the exporter read these to keep
packed rows inside what every layer attends and every position table holds.

* `position_offset(model)`: where position ids start (RoBERTa-style embeddings: padding_idx + 1);
  `max_positions(model)`: the longest sequence its position table allows, that offset taken off.
* `position_limit(model)`: the hard limit, for models with a learned position table (BERT, RoBERTa,
  DistilBERT, GPT-2, OPT, BART: a longer row indexes past the table and fails), else None (rotary,
  ALiBi and relative positions: Llama, Qwen2, T5; their config's limit is a training length, not a table).
* `attention_spans(model)`: the window and chunk sizes its attention layers apply (`SPAN_FIELDS`:
  `sliding_window`: Mistral, Gemma-2/3, Qwen2 with `use_sliding_window`, Phi-3, Cohere2, GPT-OSS;
  ModernBERT's `local_attention`; Llama-4's `attention_chunk_size`), those below its position limit; `[]`
  when every layer attends the whole sequence. `layer_types(model)`: the config's per-layer attention kinds.
* `length_dependent_rope(model)`: ("longrope", original limit) or ("dynamic", limit) where the rotary
  frequencies depend on the batch's largest position (Phi-3's LongRoPE switches to its long factors past
  `original_max_position_embeddings`; dynamic NTK rescales past `max_position_embeddings`, and keeps the
  rescaled table for later calls), else None.

Read from the config (the text model's, for a multimodal config) and the embedding module; never runs
the model.
"""

from __future__ import annotations

from torch import nn

from turbotrain.modeling.tasks import _text_config, unwrap


def position_offset(model: nn.Module) -> int:
    """RoBERTa-style embeddings count positions from padding_idx + 1; others from 0."""
    inner = unwrap(model)
    embeddings = getattr(getattr(inner, "base_model", inner), "embeddings", None)
    padding_idx = getattr(embeddings, "padding_idx", None)
    if hasattr(embeddings, "create_position_ids_from_input_ids") and isinstance(padding_idx, int):
        return padding_idx + 1
    return 0


SPAN_FIELDS = ("sliding_window", "local_attention", "attention_chunk_size", "attention_window")


def attention_spans(model: nn.Module) -> list[int]:
    """Window and chunk sizes (tokens) the attention applies, sorted; those at or above the position limit
    (`max_position_embeddings`) never bind and are left out."""
    config = _text_config(model)
    limit = getattr(config, "max_position_embeddings", None) or float("inf")
    spans = set()
    for name in SPAN_FIELDS:
        for span in _config_values(config, name):
            if isinstance(span, int) and not isinstance(span, bool) and 0 < span < limit:
                spans.add(span)
    return sorted(spans)


def _config_values(config, name: str) -> list:
    """`config.<name>` as a flat list; a heterogeneous config (per-layer attributes, which refuse global reads)
    gives each layer's value."""
    try:
        values = [getattr(config, name, None)]
    except Exception:
        try:
            values = [getattr(layer, name, None) for layer in config.per_layer_config]
        except Exception:
            values = []
    return [item for value in values for item in (value if isinstance(value, (list, tuple)) else [value])]


def length_dependent_rope(model: nn.Module) -> tuple[str, int] | None:
    """The rotary rule whose frequencies follow the largest position in a batch, and its length limit."""
    config = _text_config(model)
    parameters = getattr(config, "rope_parameters", None) or {}
    tables = (
        parameters.values() if all(isinstance(v, dict) for v in parameters.values()) and parameters else [parameters]
    )
    for table in tables:
        kind = str(table.get("rope_type", table.get("type", "default")))
        if kind == "longrope":
            limit = table.get("original_max_position_embeddings") or getattr(
                config, "original_max_position_embeddings", None
            )
            return ("longrope", int(limit or getattr(config, "max_position_embeddings", 0)))
        if "dynamic" in kind:
            return ("dynamic", int(getattr(config, "max_position_embeddings", 0)))
    return None


def layer_types(model: nn.Module) -> list[str]:
    """The config's attention kind of each layer ("full_attention", "sliding_attention", ...), or []."""
    kinds = getattr(_text_config(model), "layer_types", None)
    return [str(kind) for kind in kinds] if isinstance(kinds, (list, tuple)) else []


POSITION_TABLE_NAMES = ("position", "wpe")  # BERT's position_embeddings, OPT's embed_positions; GPT-2's wpe


def position_limit(model: nn.Module) -> int | None:
    """The longest sequence the model's learned position table holds (RoBERTa's `max_position_embeddings -
    padding_idx - 1`, OPT's and BART's `max_position_embeddings`), or None for a model without one.

    The table is an `nn.Embedding` named for positions whose rows (less the `offset` OPT and BART keep before
    position 0) are the text config's `max_position_embeddings` (GPT-2: `n_positions`); a vision tower's patch
    positions (a multimodal model's) hold another count and are not taken."""
    inner = unwrap(model)
    config = _text_config(model) if hasattr(inner, "config") else None
    declared = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if not isinstance(declared, int):
        return None
    for name, module in inner.named_modules():
        leaf = name.rpartition(".")[2].lower()
        if not isinstance(module, nn.Embedding) or not any(part in leaf for part in POSITION_TABLE_NAMES):
            continue
        offset = getattr(module, "offset", 0)
        if module.num_embeddings - (offset if isinstance(offset, int) else 0) == declared:
            return declared - position_offset(model)
    return None


def max_positions(model: nn.Module) -> int:
    """The longest sequence the model's position table allows (4096 where its config names no limit)."""
    config = unwrap(model).config
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 4096
    return int(positions) - position_offset(model)
