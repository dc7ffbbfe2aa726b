"""Stock `Trainer` against `TurboTrainer` on one tiny model per distinct code path of Transformers' families.

The models are built generically from each family's config (`scripts/architectures.py`, the same builder
as `scripts/architecture_sweep.py`, which runs every family): hidden 32, 2 layers, vocabulary 1,000, no
dropout; padded batches of variable length (3..24 tokens) with every window and chunk option set below
those lengths (sliding windows 4, local bands 8, chunks 8: the builder's `WINDOWS`). Two steps from the same weights must give the same losses
(fp32, 1e-5 relative) and the same first-step gradients (1e-5 of each tensor's scale).
"""

from __future__ import annotations

import pytest
from scripts.architectures import compare

# (model type, task): one row per code path the passes take
CASES = [
    ("bert", "masked-lm"),  # masked LM, head with transform: gathered at `cls`
    ("roberta", "seq-cls"),  # positions from padding_idx + 1; encoder pooling, packed
    ("roberta", "causal-lm"),  # an encoder's causal-LM head without is_decoder: bidirectional, shifted loss
    ("distilbert", "token-cls"),  # token classification, packed
    ("deberta-v2", "masked-lm"),  # relative attention
    ("modernbert", "masked-lm"),  # unpadding model of its own, global/local attention
    ("gpt2", "causal-lm"),  # Conv1D, tanh GELU fused, tied head
    ("gpt2", "seq-cls"),  # decoder classifier: padding-free refused
    ("llama", "token-cls"),  # rope decoder, token classification packed without shift
    ("qwen2_moe", "causal-lm"),  # mixture of experts
    ("gemma2", "causal-lm"),  # final logit softcapping, sliding window
    ("gemma3_text", "causal-lm"),  # sliding and full layers: per-layer masks from packed position_ids
    ("mistral", "causal-lm"),  # one sliding window for every layer
    ("qwen2", "causal-lm"),  # use_sliding_window: full layer, then sliding
    ("cohere2", "causal-lm"),  # sliding and full layers, logit scale
    ("gpt_oss", "causal-lm"),  # sliding and full layers, attention sinks, a mask that ignores position_ids
    ("llama4_text", "causal-lm"),  # chunked attention: chunks counted from each packed sequence's start
    ("mpt", "token-cls"),  # a decoder without is_causal flags: causality from a forward probe, packed
    ("convbert", "token-cls"),  # a convolution over the sequence: padding-free refused
    ("bloom", "causal-lm"),  # alibi
    ("t5", "seq2seq-lm"),  # encoder-decoder, decoder inputs from labels
    ("bart", "seq2seq-lm"),  # encoder-decoder with learned positions
]


@pytest.mark.parametrize("model_type,task", CASES)
def test_turbo_trains_like_stock(model_type, task):
    outcome = compare(model_type, task, steps=2)
    assert len(outcome.turbo_losses) == len(outcome.stock_losses) == 2
    assert outcome.loss_diff <= 1e-5, (outcome.stock_losses, outcome.turbo_losses)
    assert outcome.grad_diff <= 1e-5, outcome.worst
