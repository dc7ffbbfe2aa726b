"""The RoBERTa layout the main job and the benchmark train from scratch (built from a config, no download)."""

from __future__ import annotations

from transformers import RobertaConfig


def roberta_config(vocab_size: int, hidden_size: int, num_layers: int, num_heads: int, seq_len: int,
                   dropout: float = 0.1, num_labels: int = 2) -> RobertaConfig:
    """FFN 4 x hidden; positions start at padding_idx + 1, hence seq_len + 2 position embeddings."""
    return RobertaConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers, num_attention_heads=num_heads,
        intermediate_size=4 * hidden_size, max_position_embeddings=seq_len + 2, type_vocab_size=1,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout, num_labels=num_labels,
    )
