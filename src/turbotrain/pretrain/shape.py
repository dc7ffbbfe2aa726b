"""The RoBERTa layout the main job trains from scratch, and the benchmark too (built from a config, no download).

`ModelShape` holds the size options both share (and the CLI exposes as the same flags); each of them
subclasses it with its own defaults (`vocab_size`: 8,000 for pretraining on the built-in corpus,
RoBERTa's 50,265 for the benchmark).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import RobertaConfig


@dataclass
class ModelShape:
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    seq_len: int = 128
    vocab_size: int = 8000
    batch_size: int = 16
    seed: int = 0

    def roberta_config(self, vocab_size: int | None = None, dropout: float = 0.1, num_labels: int = 2) -> RobertaConfig:
        """FFN 4 x hidden; positions start at padding_idx + 1, hence seq_len + 2 position embeddings."""
        from transformers import RobertaConfig  # here: the CLI reads the shape's defaults without Transformers

        return RobertaConfig(
            vocab_size=vocab_size or self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            intermediate_size=4 * self.hidden_size,
            max_position_embeddings=self.seq_len + 2,
            type_vocab_size=1,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
            num_labels=num_labels,
        )
