"""`--task mlm | cls | clm`: a RoBERTa or GPT-2 model trained on the built-in corpus.

* mlm, `--lengths fixed` (mlm's default): masked LM on blocks of `--seq-len` tokens, no padding anywhere.
  Default size: hidden 256, 4 layers, 4 heads, seq 128, vocabulary 50,265 (RoBERTa's), batch 16.
* `--lengths variable` (cls runs only these): every paragraph at its natural length (truncated at
  `--seq-len`), batched with the stock collators' dynamic padding (to the longest of the batch): mlm
  masked LM, cls sequence classification (label: does the paragraph mention "return"). On CPython 3.11
  the median paragraph is 21 tokens and stock padding wastes ~66% of a batch of 16.
* clm (fixed lengths only): causal LM on the same blocks with a GPT-2 model of the same size
  (`GPT2LMHeadModel`, learned positions, tied head; `--vocab-size 50257` for GPT-2's vocabulary): every
  position is labelled, so label sparsity and packing have nothing to remove (the dense case).

The model's vocabulary is the workload's; the tokenizer is trained on the built-in corpus up to that
size (the corpus yields ~16,000 tokens, so ids above that stay unused, as rare tokens would be).
`--dropout` defaults to 0.1 for fixed lengths and 0 for variable ones: packed rows have other shapes than
padded ones, so with dropout the two draw different masks and losses agree only statistically.
Peers: stock, compiled, turbo, turbo:<backend> (bench/peers.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import (
    DataCollatorForLanguageModeling,
    GPT2Config,
    GPT2LMHeadModel,
    RobertaForMaskedLM,
    RobertaForSequenceClassification,
)

from turbotrain.bench.peers import TRAINER_PEERS, TrainerWorkload
from turbotrain.bench.workload import register_workload
from turbotrain.data import MaskedLMData, build_mlm_data, stdlib_corpus, train_tokenizer
from turbotrain.data.variable import build_variable_length_data, length_histogram
from turbotrain.pretrain.shape import ModelShape

LENGTHS = ("fixed", "variable")
NAMES = {"mlm": "RoBERTa MLM", "cls": "RoBERTa sequence classification", "clm": "GPT-2 causal LM"}


@register_workload("mlm", "cls", "clm")
@dataclass
class CorpusLM(TrainerWorkload, ModelShape):
    vocab_size: int = field(default=50265, metadata={"help": "the model's vocabulary (RoBERTa's by default)"})
    peers: tuple[str, ...] = field(default=TRAINER_PEERS, metadata={"help": "stock compiled turbo turbo:<backend>"})
    lengths: str | None = field(
        default=None,
        metadata={
            "help": "fixed blocks, or paragraphs at their natural lengths (default: variable for cls)",
            "choices": LENGTHS,
        },
    )
    dropout: float | None = field(default=None, metadata={"help": "default: 0.1 for fixed lengths, 0 for variable"})

    def __post_init__(self):
        super().__post_init__()
        if self.lengths is not None and self.lengths not in LENGTHS:
            raise ValueError(f"lengths must be one of {LENGTHS}")
        if self.task == "cls" and self.length_mode == "fixed":
            raise ValueError("task='cls' needs lengths='variable' (rows at their natural lengths)")
        if self.task == "clm" and self.length_mode != "fixed":
            raise ValueError("task='clm' needs lengths='fixed' (causal LM on fixed blocks)")

    @property
    def length_mode(self) -> str:
        return self.lengths or ("variable" if self.task == "cls" else "fixed")

    @property
    def causal(self) -> bool:
        return self.task == "clm"

    @property
    def dropout_probability(self) -> float:
        if self.dropout is not None:
            return self.dropout
        return 0.1 if self.length_mode == "fixed" else 0.0

    def model(self):
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
        corpus = stdlib_corpus()
        tokenizer = train_tokenizer(corpus, min(self.vocab_size, 50265))
        if self.length_mode == "variable":
            return build_variable_length_data(corpus, tokenizer, self.seq_len, self.task, seed=self.seed)
        data = build_mlm_data(corpus, tokenizer, seq_len=self.seq_len, eval_fraction=0, seed=self.seed)
        if self.task == "clm":
            data.collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)  # labels = input_ids
        return data

    def title(self) -> str:
        lengths = f"seq {self.seq_len}" if self.length_mode == "fixed" else f"variable lengths <= {self.seq_len}"
        shape = f"h{self.hidden_size} L{self.num_layers} {lengths} vocab {self.vocab_size:,} batch {self.batch_size}"
        return f"{NAMES[self.task]} {shape}{self.run_suffix()}"

    def extras(self, model, data) -> dict:
        if self.length_mode != "variable":
            return {}
        return {"length_histogram": length_histogram([len(ids) for ids in data.train["input_ids"]])}
