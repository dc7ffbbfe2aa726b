"""The benchmark workload: a RoBERTa masked LM trained on blocks of the built-in corpus.

Default (issue 2): hidden 256, 4 layers, 4 heads, seq 128, vocabulary 50,265 (RoBERTa's), batch 16.
The model's vocabulary is the workload's; the tokenizer is trained on the built-in corpus up to that
size (the corpus yields ~16,000 tokens, so ids above that stay unused, as rare tokens would be).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from transformers import RobertaConfig, RobertaForMaskedLM

from turbotrain.data import MaskedLMData, build_mlm_data, stdlib_corpus, train_tokenizer

PEERS = ("stock", "compiled", "turbo")


@dataclass
class Workload:
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    seq_len: int = 128
    vocab_size: int = 50265
    batch_size: int = 16
    seed: int = 0
    rounds: int = 3
    steps: int = 5
    warmup: int = 1
    peers: tuple[str, ...] = PEERS
    backend: str = "auto"
    bf16: bool = False

    def __post_init__(self):
        unknown = set(self.peers) - set(PEERS)
        if unknown or not self.peers:
            raise ValueError(f"unknown peers {sorted(unknown)}; choose from {', '.join(PEERS)}")
        if self.rounds < 1 or self.steps < 1 or self.warmup < 0:
            raise ValueError("rounds and steps must be >= 1, warmup >= 0")

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def describe(self) -> dict:
        return asdict(self)

    def command(self) -> str:
        """The `turbotrain bench` command line that reproduces this workload."""
        flags = []
        for name, value in asdict(self).items():
            if value == getattr(Workload, name, None) or name == "peers" and tuple(value) == PEERS:
                continue
            flag = "--" + {"num_layers": "layers", "num_heads": "heads"}.get(name, name).replace("_", "-")
            if isinstance(value, bool):
                flags.append(flag)
            else:
                flags.append(f"{flag} {' '.join(value) if isinstance(value, tuple) else value}")
        return " ".join(["turbotrain bench", *flags])

    def model_config(self) -> RobertaConfig:
        return RobertaConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads, intermediate_size=4 * self.hidden_size,
            max_position_embeddings=self.seq_len + 2, type_vocab_size=1, pad_token_id=1,
        )

    def initial_model(self) -> RobertaForMaskedLM:
        torch.manual_seed(self.seed)
        return RobertaForMaskedLM(self.model_config())

    def data(self) -> MaskedLMData:
        corpus = stdlib_corpus()
        tokenizer = train_tokenizer(corpus, min(self.vocab_size, 50265))
        return build_mlm_data(corpus, tokenizer, seq_len=self.seq_len, eval_fraction=0, seed=self.seed)
