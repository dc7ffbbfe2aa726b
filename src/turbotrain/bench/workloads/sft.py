"""`--task sft`: supervised fine-tuning of a decoder on chat-style rows, at a published model's shape.

Model: `--shape` (bench/shapes.py): `small` (default: a Qwen2 layout, hidden 256, 4 layers, 4 heads with
half as key/value heads, SwiGLU FFN of 4 x hidden, vocabulary 50,265) or a published config
(`gemma3-270m`, `qwen2.5-0.5b`, `llama3.2-1b`, `qwen3-1.7b`), random weights; `--hidden-size`, `--layers`,
`--heads`, `--vocab-size` override the shape's; tied input and output embeddings unless `--untied`;
`--lora` wraps it with PEFT LoRA (r=16, alpha 32, on q/k/v/o and the MLP projections), so only the
adapters train. Dropout 0 (`--dropout`).
Data (data/chat.py), completion-only labels, dynamic padding, rows cut to `--seq-len` (prompt first):
`--lengths chat` (default): prompt = a standard-library function's signature and first docstring line,
completion = the rest of its docstring (short prompts, ~70% of tokens labelled); `--lengths code`: prompt = a
function's code, completion = its docstring (long prompts labelled -100, ~25% of tokens labelled: the shape
of most chat fine-tuning sets). The tokenizer is the built-in corpus's (~16,000 tokens): ids above stay unused, as the
rare tokens of a real 151,936-token vocabulary would.

`--lengths long` (data/long_rows.py): rows of log-normal lengths (median 256) up to 4,096 tokens, every token
labelled: the dense case, where padding is all that packing removes; the model's position limit is raised to
4,096 where the shape's is lower, and `--seq-len` does not apply.

Peers, built as a user writes them, same weights and batches:
* `stock`: `Trainer`; `turbo`: `TurboTrainer` (and `compiled`, `turbo:<backend>`: bench/peers.py);
* `turbo-masks`: `TurboTrainer` packing with masks instead of the packed-attention function
  (`padding_free_attention="masks"`: a dense [R, 1, C, C] mask per row, rows as long as the longest sequence;
  what padding-free did before packed attention), to show what packed attention adds;
* `trl`: TRL's `SFTTrainer` with `SFTConfig(completion_only_loss=True)` on the same token ids (TRL builds
  the labels from `completion_mask`); `trl+turbo`: `turbo(SFTTrainer)` with `turbo_arguments(SFTConfig)`.
Both TRL peers run with `gradient_checkpointing=False` (TRL's default is True) and the run's dtype (fp32
unless `--bf16`), as the Trainer peers do, so every peer does the same work; `--trl-defaults` gives them TRL's
SFT defaults instead (bf16 autocast and gradient checkpointing on, as a user who changes nothing runs), the
Trainer peers keeping the run's dtype.
Reported beside tokens/s and MFU: peak memory and its split (weights, gradients, optimizer state,
logits, activations), where a published shape's memory goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

from turbotrain.args import turbo_arguments
from turbotrain.bench.peers import TrainerPeer, TrainerWorkload
from turbotrain.bench.shapes import SHAPES, shape_config
from turbotrain.bench.workload import register_workload
from turbotrain.data import stdlib_corpus, train_tokenizer
from turbotrain.data.chat import ROW_KINDS, SftData, build_sft_data
from turbotrain.data.long_rows import LONGEST, build_long_rows
from turbotrain.data.variable import length_histogram
from turbotrain.integrations.trl import classes
from turbotrain.trainer import turbo
from turbotrain.utils.imports import require

SFT_PEERS = ("stock", "trl", "trl+turbo", "turbo")
LENGTHS = (*ROW_KINDS, "long")
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
OVERRIDES = {"hidden_size": "hidden_size", "num_layers": "num_hidden_layers", "num_heads": "num_attention_heads"}


def with_lora(model, feature: str):
    """`model` wrapped with PEFT LoRA (r=16, alpha 32, no dropout, on q/k/v/o and the MLP projections)."""
    require("peft", feature)
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def causal_lm(config, seed: int, lora_for: str | None = None):
    """A causal LM for `config`, its weights drawn from `seed`; with LoRA adapters where `lora_for` names the flag
    that asks for them (`with_lora`'s `feature`)."""
    torch.manual_seed(seed)
    model = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)](config)
    return with_lora(model, lora_for) if lora_for else model


def corpus_tokenizer(vocab_size: int):
    """A tokenizer trained on the stdlib corpus, with at most `vocab_size` (and RoBERTa's 50,265) entries."""
    return train_tokenizer(stdlib_corpus(), min(vocab_size, 50265))


@register_workload("sft")
@dataclass
class Sft(TrainerWorkload):
    peers: tuple[str, ...] = field(
        default=SFT_PEERS, metadata={"help": "stock trl trl+turbo turbo turbo-masks compiled"}
    )
    shape: str = field(default="small", metadata={"help": "a published model's shape", "choices": SHAPES})
    hidden_size: int | None = field(default=None, metadata={"help": "default: the shape's (small: 256)"})
    num_layers: int | None = field(default=None, metadata={"help": "default: the shape's (small: 4)"})
    num_heads: int | None = field(default=None, metadata={"help": "default: the shape's (small: 4)"})
    vocab_size: int | None = field(default=None, metadata={"help": "default: the shape's (small: 50,265)"})
    seq_len: int = field(default=128, metadata={"help": "rows are cut to this many tokens (chat and code rows)"})
    lengths: str = field(
        default="chat",
        metadata={
            "help": "chat rows (short prompts), code rows (long prompts) or long-tailed rows up to 4,096",
            "choices": LENGTHS,
        },
    )
    lora: bool = field(default=False, metadata={"help": "train PEFT LoRA adapters only"})
    untied: bool = field(default=False, metadata={"help": "separate input and output embeddings"})
    dropout: float = field(default=0.0, metadata={"help": "attention dropout"})
    trl_defaults: bool = field(
        default=False, metadata={"help": "TRL peers keep TRL's SFT defaults: bf16 and gradient checkpointing on"}
    )

    own_peers = ("trl", "trl+turbo", "turbo-masks")
    causal = True

    def __post_init__(self):
        super().__post_init__()
        if self.lengths not in LENGTHS:
            raise ValueError(f"--task sft takes lengths {' or '.join(LENGTHS)}, not '{self.lengths}'")

    def config(self):
        overrides = {name: getattr(self, mine) for mine, name in OVERRIDES.items() if getattr(self, mine)}
        if self.vocab_size:
            overrides["vocab_size"] = self.vocab_size
        config = shape_config(
            self.shape, seq_len=self.seq_len, overrides=overrides, untied=self.untied, dropout=self.dropout
        )
        if self.lengths == "long":
            config.max_position_embeddings = max(config.max_position_embeddings, LONGEST)
        return config

    def model(self):
        return causal_lm(self.config(), self.seed, "the sft workload's --lora" if self.lora else None)

    def data(self) -> SftData:
        tokenizer = corpus_tokenizer(self.config().vocab_size)
        if self.lengths == "long":
            return build_long_rows(tokenizer, seed=self.seed)
        return build_sft_data(tokenizer, self.seq_len, seed=self.seed, kind=self.lengths)

    def trainer(self, peer: str, model, data: SftData, counter, output_dir: str) -> TrainerPeer:
        if peer == "turbo-masks":
            options = {"padding_free_attention": "masks"}
            return TrainerPeer(self.build_trainer("turbo", model, data, counter, output_dir, options), counter)
        if peer not in ("trl", "trl+turbo"):
            return super().trainer(peer, model, data, counter, output_dir)
        config_class, trainer_class = classes("SFT", f"the sft workload's '{peer}' peer")
        if peer == "trl+turbo":
            config_class, trainer_class = turbo_arguments(config_class), turbo(trainer_class)
        args = config_class(**self.trl_arguments(output_dir), completion_only_loss=True, max_length=None)
        trainer = trainer_class(
            model=self.fresh(model), args=args, train_dataset=data.trl_train, processing_class=data.tokenizer
        )
        trainer.data_collator = counter.wrap(trainer.data_collator)  # TRL's own collator, counted
        return TrainerPeer(trainer, counter)

    def trl_arguments(self, output_dir: str) -> dict:
        """The TRL peers' arguments: the run's (fp32 or `--bf16`, no checkpointing), or with `--trl-defaults`
        TRL's SFT defaults (bf16 autocast, gradient checkpointing with TRL's and Transformers' default kwargs)."""
        common = self.common_arguments(output_dir)
        if not self.trl_defaults:
            return {**common, "gradient_checkpointing": False}
        return {**common, "bf16": True, "use_cpu": not torch.cuda.is_available()}

    def title(self) -> str:
        config = self.config()
        mode = "LoRA" if self.lora else "full fine-tune"
        shape = f"{self.shape} ({config.model_type})" if self.shape != "small" else "Qwen2-shaped"
        sizes = f"h{config.hidden_size} L{config.num_hidden_layers} vocab {config.vocab_size:,}"
        longest = LONGEST if self.lengths == "long" else self.seq_len
        kinds = {"long": "long-tailed lengths, every token labelled,", "code": "code-to-docstring rows,"}
        kind = kinds.get(self.lengths, "variable lengths")
        lengths = f"{kind} <= {longest} batch {self.batch_size}"
        trl = " (TRL peers: TRL's defaults, bf16 + gradient checkpointing)" if self.trl_defaults else ""
        tied = "untied" if self.untied else "tied"
        return f"SFT {shape}, {mode}, {tied}, {sizes} {lengths}{self.run_suffix()}{trl}"

    def extras(self, model, data) -> dict:
        return {"length_histogram": length_histogram([len(ids) for ids in data.train["input_ids"]])}
