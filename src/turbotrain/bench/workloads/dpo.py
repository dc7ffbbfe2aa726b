"""`--task dpo`: TRL's `DPOTrainer` on preference pairs, at a published model's shape, reference model on.

Model: `--shape` and its overrides as the sft workload's (bench/shapes.py; `small` is a Qwen2 layout, hidden
256, 4 layers; `--vocab-size 151936` gives the issue's Qwen2-shaped vocabulary), random weights, tied
embeddings unless `--untied`. Full fine-tuning trains the model against a separate reference model (a second
copy of the same initial weights, `ref_model=`); `--lora` trains PEFT LoRA adapters (the sft workload's:
r=16 on q/k/v/o and the MLP) and the reference is the same model with its adapters off (TRL's own rule).
Data (data/preference.py): `--pairs` pairs of corpus text, prompts of `--prompt-tokens` (default 30-200)
and chosen / rejected completions of `--completion-tokens` (default 20-120) tokens, tokenized by TRL.
Every peer: TRL's sigmoid loss, beta 0.1, no truncation (`max_length=None`), `gradient_checkpointing=False`
unless `--gradient-checkpointing`, and fp32 unless `--bf16` (TRL's defaults are True and bf16), reference log-probs computed in the step
(`precompute_ref_log_probs=False`), TRL's own collator (each batch is 2 x batch rows: chosen, then rejected).

Peers, built as a user writes them, same weights and batches:
* `stock`: `DPOTrainer` with `DPOConfig`; `turbo`: `turbo(DPOTrainer)` with `turbo_arguments(DPOConfig)`
  (`turbo:<backend>` on that backend, `--turbo-off` as every workload's);
* `trl-padding-free`: `DPOConfig(padding_free=True)`, TRL's own peer; a TRL release that turns it off again
  in `__init__` (TRL 1.16 does, "temporarily unavailable") makes the peer an error, never a stock copy;
* `liger`: `DPOConfig(use_liger_kernel=True)`, Liger's chunked fused-linear DPO loss; an error naming the
  package where `liger_kernel` does not import.
The unit is real tokens (the attention mask's ones over both rows of every pair). No FLOP count (the
formula does not describe two models and a preference loss), so no MFU. Peak memory and the loss difference
as every workload's; `extras` adds the pairs' token lengths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedTokenizerBase

from turbotrain.bench.peers import TrainerPeer, TrainerWorkload
from turbotrain.bench.shapes import SHAPES, shape_config
from turbotrain.bench.workload import register_workload
from turbotrain.bench.workloads.sft import OVERRIDES, causal_lm, corpus_tokenizer
from turbotrain.data.preference import build_preference_pairs, length_summary
from turbotrain.integrations.trl import classes
from turbotrain.utils.imports import is_available

DPO_PEERS = ("stock", "turbo")
TRL_OPTIONS = {"trl-padding-free": {"padding_free": True}, "liger": {"use_liger_kernel": True}}
SPECIAL_TOKENS = 8  # room in the position table for the tokens TRL adds (bos, eos) beyond the drawn lengths


@dataclass
class DpoData:
    pairs: Any  # a Dataset of prompt / chosen / rejected strings
    tokenizer: PreTrainedTokenizerBase


@register_workload("dpo")
@dataclass
class Dpo(TrainerWorkload):
    peers: tuple[str, ...] = field(default=DPO_PEERS, metadata={"help": "stock turbo trl-padding-free liger"})
    batch_size: int = field(default=4, metadata={"help": "examples per step"})
    shape: str = field(default="small", metadata={"help": "a published model's shape", "choices": SHAPES})
    hidden_size: int | None = field(default=None, metadata={"help": "default: the shape's (small: 256)"})
    num_layers: int | None = field(default=None, metadata={"help": "default: the shape's (small: 4)"})
    num_heads: int | None = field(default=None, metadata={"help": "default: the shape's (small: 4)"})
    vocab_size: int | None = field(default=None, metadata={"help": "default: the shape's (small: 50,265)"})
    lora: bool = field(default=False, metadata={"help": "train PEFT LoRA adapters only"})
    untied: bool = field(default=False, metadata={"help": "separate input and output embeddings"})
    pairs: int = field(default=64, metadata={"help": "preference pairs in the dataset"})
    prompt_tokens: tuple[int, ...] = field(default=(30, 200), metadata={"help": "a prompt's fewest and most tokens"})
    completion_tokens: tuple[int, ...] = field(
        default=(20, 120), metadata={"help": "a completion's fewest and most tokens"}
    )
    gradient_checkpointing: bool = field(
        default=False, metadata={"help": "recompute activations in the backward, every peer (TRL's default)"}
    )

    own_peers = tuple(TRL_OPTIONS)

    def __post_init__(self):
        super().__post_init__()
        self.prompt_tokens, self.completion_tokens = tuple(self.prompt_tokens), tuple(self.completion_tokens)
        for name in ("prompt_tokens", "completion_tokens"):
            low, high = getattr(self, name)
            if not 1 <= low <= high:
                raise ValueError(f"--{name.replace('_', '-')} takes two lengths, fewest first, got {low} {high}")
        if "compiled" in self.peers:
            raise ValueError("--task dpo has no 'compiled' peer (DPOTrainer with torch_compile is not measured)")
        if "liger" in self.peers and not is_available("liger_kernel"):
            raise ValueError("the 'liger' peer needs the liger-kernel package, which is not installed")

    def config(self):
        overrides = {name: getattr(self, mine) for mine, name in OVERRIDES.items() if getattr(self, mine)}
        if self.vocab_size:
            overrides["vocab_size"] = self.vocab_size
        longest = self.prompt_tokens[1] + 2 * self.completion_tokens[1] + SPECIAL_TOKENS
        return shape_config(self.shape, seq_len=longest, overrides=overrides, untied=self.untied, dropout=0.0)

    def model(self):
        return causal_lm(self.config(), self.seed, "the dpo workload's --lora" if self.lora else None)

    def data(self) -> DpoData:
        tokenizer = corpus_tokenizer(self.config().vocab_size)
        pairs = build_preference_pairs(
            tokenizer, self.pairs, tuple(self.prompt_tokens), tuple(self.completion_tokens), seed=self.seed
        )
        return DpoData(pairs=pairs, tokenizer=tokenizer)

    def trainer(self, peer: str, model, data: DpoData, counter, output_dir: str) -> TrainerPeer:
        trl_classes = classes("DPO", f"the dpo workload's '{peer}' peer")
        config_class, trainer_class, options = self.peer_classes(peer, *trl_classes)
        options = {**TRL_OPTIONS.get(peer, {}), **options}
        args = config_class(
            **self.common_arguments(output_dir),
            **options,
            beta=0.1,
            max_length=None,
            gradient_checkpointing=self.gradient_checkpointing,
            precompute_ref_log_probs=False,
        )
        trainer = self.preference_trainer(trainer_class, args, model, data)
        if peer == "trl-padding-free" and not getattr(trainer, "padding_free", False):
            raise RuntimeError(
                "the 'trl-padding-free' peer: this TRL release turned DPOConfig(padding_free=True) off in "
                "DPOTrainer.__init__ (see its warning), so it would measure stock padding again"
            )
        trainer.data_collator = counter.wrap(trainer.data_collator)  # TRL's own collator, counted
        return TrainerPeer(trainer, counter)

    def preference_trainer(self, trainer_class: type, args, model, data: DpoData):
        """`trainer_class` on a fresh copy of `model` and `data`, with a separate reference model (a fresh copy
        too) unless LoRA, whose reference is the policy with its adapters off."""
        return trainer_class(
            model=self.fresh(model),
            ref_model=None if self.lora else self.fresh(model),
            args=args,
            train_dataset=data.pairs,
            processing_class=data.tokenizer,
        )

    def title(self) -> str:
        config = self.config()
        mode = "LoRA (reference: adapters off)" if self.lora else "full fine-tune, separate reference model"
        shape = f"{self.shape} ({config.model_type})" if self.shape != "small" else "Qwen2-shaped"
        sizes = f"h{config.hidden_size} L{config.num_hidden_layers} vocab {config.vocab_size:,}"
        prompts, completions = "-".join(map(str, self.prompt_tokens)), "-".join(map(str, self.completion_tokens))
        lengths = f"prompts {prompts}, completions {completions} tokens, batch {self.batch_size} pairs"
        tied = "untied" if self.untied else "tied"
        return f"DPO {shape}, {mode}, {tied}, {sizes}, {lengths}{self.run_suffix()}"

    def extras(self, model, data: DpoData) -> dict:
        return {"pair_lengths": length_summary(data.tokenizer, data.pairs)}
