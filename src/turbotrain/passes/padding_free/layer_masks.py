"""Per-layer-type attention masks for packed rows (padding-free's "layers" mode).

A packed row holds several sequences. A model whose layers follow one rule (BERT: every token sees its
whole sequence) is served by one block-diagonal mask. A model whose layers differ (`config.layer_types`:
ModernBERT alternates "full_attention" with a "sliding_attention" band of `local_attention` tokens;
GPT-OSS alternates full and sliding causal layers) takes one mask per layer type, as a dict
`{layer type: 4-D mask}` in place of `attention_mask` (the form its forward accepts from `generate`).

Each mask is made by the very `masking_utils` function such a model calls for that layer type:
* causal kinds (full, sliding, chunked) from the packed rows' restarting `position_ids`, which
  `masking_utils` reads as packed sequences: each sequence masked alone, its positions counted from its
  own start (so chunks and windows start where stock's do);
* bidirectional kinds (full, sliding) with the segment rule ANDed in (`packed_sequence_mask_function`):
  a query sees a key only if stock would let it in its own padded row AND both are of one sequence.
  Sequences are contiguous in a row, so distances within a sequence are stock's: bands come out as stock's.
What this cannot see are overlays a model adds itself (`or_mask_function`, `and_mask_function`): the
"positions" mode keeps those, and the self-check compares every token, so a model that needs them fails it.
Layer types without a builder here are refused by the caller. A model without `config.layer_types` (one
rule for every layer: BERT on flex attention) gets one mask, made by the "full_attention" builder, not a dict.

Shapes: segments [R, C] (the packer's `turbotrain_segments`) -> masks in the form the model's attention
implementation takes (SDPA: [R, 1, C, C] bool; eager: additive float).
"""

from __future__ import annotations

import torch
from transformers import masking_utils


def _builders(names: dict[str, str]) -> dict:
    """{layer type: masking_utils function} for the functions this Transformers has (older releases lack
    some: 5.0 has no bidirectional sliding-window builder, so ModernBERT's local layers are refused there)."""
    found = {kind: getattr(masking_utils, name, None) for kind, name in names.items()}
    return {kind: builder for kind, builder in found.items() if builder is not None}


CAUSAL_BUILDERS = _builders(
    {
        "full_attention": "create_causal_mask",
        "sliding_attention": "create_sliding_window_causal_mask",
        "chunked_attention": "create_chunked_causal_mask",
    }
)
BIDIRECTIONAL_BUILDERS = _builders(
    {"full_attention": "create_bidirectional_mask", "sliding_attention": "create_bidirectional_sliding_window_mask"}
)


def unsupported_layer_types(kinds: list[str], causal: bool) -> list[str]:
    """The layer types among `kinds` that no builder here reproduces."""
    builders = CAUSAL_BUILDERS if causal else BIDIRECTIONAL_BUILDERS
    return sorted({kind for kind in kinds if kind not in builders})


def layer_masks(
    config, segments: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype, kinds: list[str], causal: bool
) -> dict:
    """`{layer type: mask}` for packed rows: `segments` [R, C] the sequence of each token, `positions` [R, C]
    its position within its sequence."""
    rows, capacity = segments.shape
    shape_only = torch.empty((rows, capacity, 0), dtype=dtype, device=segments.device)  # sizes, dtype, device
    same_sequence = masking_utils.packed_sequence_mask_function(segments)

    def build(kind: str):
        if causal:
            return CAUSAL_BUILDERS[kind](
                config=config, inputs_embeds=shape_only, attention_mask=None, cache=None, position_ids=positions
            )
        return BIDIRECTIONAL_BUILDERS[kind](
            config=config,
            inputs_embeds=shape_only,
            attention_mask=None,
            and_mask_function=same_sequence,
            allow_is_bidirectional_skip=False,
        )

    if not kinds:
        return build("full_attention")
    return {kind: build(kind) for kind in sorted(set(kinds))}
