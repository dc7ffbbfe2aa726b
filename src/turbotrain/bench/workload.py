"""The benchmark workload: a RoBERTa model trained on the built-in corpus.

lengths="fixed" (default): masked LM on blocks of `seq_len` tokens, no padding anywhere. Default
size: hidden 256, 4 layers, 4 heads, seq 128, vocabulary 50,265 (RoBERTa's), batch 16.
lengths="variable": every paragraph at its natural length (truncated at `seq_len`), batched with the
stock collators' dynamic padding (to the longest of the batch): `task="mlm"` masked LM, `task="cls"`
sequence classification (label: does the paragraph mention "return").
task="clm" (fixed lengths only): causal LM on the same blocks with a GPT-2 model of the same size
(`GPT2LMHeadModel`, learned positions, tied head; `--vocab-size 50257` for GPT-2's vocabulary): every
position is labelled, so label sparsity and packing have nothing to remove (the dense case). On CPython 3.11 the median
paragraph is 21 tokens and stock padding wastes ~66% of a batch of 16.

The model's vocabulary is the workload's; the tokenizer is trained on the built-in corpus up to that
size (the corpus yields ~16,000 tokens, so ids above that stay unused, as rare tokens would be).
`dropout` defaults to 0.1 for fixed lengths and 0 for variable ones: packed rows have other shapes than
padded ones, so with dropout the two draw different masks and losses agree only statistically.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from transformers import (
    DataCollatorForLanguageModeling,
    GPT2Config,
    GPT2LMHeadModel,
    RobertaForMaskedLM,
    RobertaForSequenceClassification,
)

from turbotrain.data import MaskedLMData, build_mlm_data, stdlib_corpus, train_tokenizer
from turbotrain.data.variable import build_variable_length_data
from turbotrain.models import ModelShape

PEERS = ("stock", "compiled", "turbo")
TURBO_PASSES = ("label_sparsity", "padding_free", "embedding_grad", "fused_optimizer", "fused_activation")
LENGTHS = ("fixed", "variable", "long")  # long: sft rows of long-tailed lengths up to 4,096 (data/long_rows.py)
TASKS = ("mlm", "cls", "clm", "sft")  # clm: GPT-2 causal LM on fixed blocks; sft: chat-style rows (bench/sft.py)


@dataclass
class Workload(ModelShape):
    vocab_size: int = 50265
    rounds: int = 3
    steps: int = 5
    warmup: int = 1
    peers: tuple[str, ...] = PEERS
    backend: str = "auto"
    bf16: bool = False
    lengths: str = "fixed"
    task: str = "mlm"
    dropout: float | None = None
    turbo_off: tuple[str, ...] = ()
    lora: bool = False  # sft: train PEFT LoRA adapters only
    untied: bool = False  # sft: separate input and output embeddings

    def __post_init__(self):
        unknown_passes = set(self.turbo_off) - set(TURBO_PASSES)
        if unknown_passes:
            raise ValueError(f"unknown passes {sorted(unknown_passes)}; choose from {', '.join(TURBO_PASSES)}")
        if self.lengths not in LENGTHS or self.task not in TASKS:
            raise ValueError(f"lengths must be one of {LENGTHS} and task one of {TASKS}")
        if self.task in ("cls", "sft") and self.lengths == "fixed":
            raise ValueError(f"task='{self.task}' needs lengths='variable' (rows at their natural lengths)")
        if self.lengths == "long" and self.task != "sft":
            raise ValueError("lengths='long' is for task='sft' (long-tailed rows, every token labelled)")
        if self.task == "clm" and self.lengths != "fixed":
            raise ValueError("task='clm' needs lengths='fixed' (causal LM on fixed blocks)")
        if self.task == "sft":
            self._check_sft_peers()
            return
        unknown = {p for p in self.peers if p.split(":", 1)[0] not in PEERS or p.startswith(("stock:", "compiled:"))}
        if unknown or not self.peers:
            raise ValueError(
                f"unknown peers {sorted(unknown)}; choose from {', '.join(PEERS)} "
                "(turbo:<backend> runs TurboTrainer on that backend)"
            )
        if self.rounds < 1 or self.steps < 1 or self.warmup < 0:
            raise ValueError("rounds and steps must be >= 1, warmup >= 0")

    def _check_sft_peers(self) -> None:
        from turbotrain.bench.sft import SFT_PEERS

        if tuple(self.peers) == PEERS:  # the default peers are the MLM ones; sft has its own
            self.peers = SFT_PEERS
        unknown = set(self.peers) - set(SFT_PEERS)
        if unknown or not self.peers:
            raise ValueError(f"unknown sft peers {sorted(unknown)}; choose from {', '.join(SFT_PEERS)}")

    @property
    def dropout_probability(self) -> float:
        if self.dropout is not None:
            return self.dropout
        return 0.1 if self.lengths == "fixed" else 0.0

    def describe(self) -> dict:
        return asdict(self)

    def command(self) -> str:
        """The `turbotrain bench` command line that reproduces this workload."""
        flags = []
        for name, value in asdict(self).items():
            if value == getattr(Workload, name, None) or name == "peers" and tuple(value) == PEERS or value == ():
                continue
            flag = "--" + {"num_layers": "layers", "num_heads": "heads"}.get(name, name).replace("_", "-")
            if isinstance(value, bool):
                flags.append(flag)
            else:
                flags.append(f"{flag} {' '.join(value) if isinstance(value, tuple) else value}")
        return " ".join(["turbotrain bench", *flags])

    def initial_model(self):
        if self.task == "sft":
            from turbotrain.bench.sft import sft_model

            return sft_model(self)
        torch.manual_seed(self.seed)
        if self.task == "clm":
            return GPT2LMHeadModel(self.gpt2_config())
        model_class = RobertaForSequenceClassification if self.task == "cls" else RobertaForMaskedLM
        return model_class(self.roberta_config(dropout=self.dropout_probability))

    def gpt2_config(self) -> GPT2Config:
        """GPT-2 layout at this size: FFN 4 x hidden, learned positions for seq_len, tied head."""
        p = self.dropout_probability
        return GPT2Config(
            vocab_size=self.vocab_size,
            n_embd=self.hidden_size,
            n_layer=self.num_layers,
            n_head=self.num_heads,
            n_positions=self.seq_len,
            resid_pdrop=p,
            embd_pdrop=p,
            attn_pdrop=p,
            bos_token_id=0,
            eos_token_id=2,
            pad_token_id=1,
        )

    def data(self) -> MaskedLMData:
        if self.task == "sft":
            from turbotrain.bench.sft import sft_data

            return sft_data(self)
        corpus = stdlib_corpus()
        tokenizer = train_tokenizer(corpus, min(self.vocab_size, 50265))
        if self.lengths == "variable":
            return build_variable_length_data(corpus, tokenizer, self.seq_len, self.task, seed=self.seed)
        data = build_mlm_data(corpus, tokenizer, seq_len=self.seq_len, eval_fraction=0, seed=self.seed)
        if self.task == "clm":
            data.collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)  # labels = input_ids
        return data
