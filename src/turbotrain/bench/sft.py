"""The `sft` workload: supervised fine-tuning of a Llama/Qwen-shaped decoder on chat-style rows.

Model: Qwen2 layout (RMSNorm, rotary positions, grouped-query attention with half the heads as key/value
heads, SwiGLU MLP of 4 x hidden), `--vocab-size` rows (151,936 is Qwen2's), tied input and output
embeddings unless `--untied`; `--lora` wraps it with PEFT LoRA (r=16, alpha 32, on q/k/v/o and the MLP
projections), so only the adapters train. Dropout 0.
Data (data/chat.py): prompt = a standard-library function's signature and first docstring line,
completion = the rest of its docstring, completion-only labels, dynamic padding, truncated at
`--seq-len`. The tokenizer is the built-in corpus's (~16,000 tokens): ids above stay unused, as the
rare tokens of a real 151,936-token vocabulary would.

Peers, built as a user writes them, same weights and batches:
* `stock`: `Trainer`; `turbo`: `TurboTrainer`; `turbo-masks`: `TurboTrainer` packing with per-layer
  masks, rows at the longest sequence (`padding_free_attention="masks"`: padding-free before packed attention);
* `trl`: TRL's `SFTTrainer` with `SFTConfig(completion_only_loss=True)` on the same token ids (TRL builds
  the labels from `completion_mask`); `trl+turbo`: `turbo(SFTTrainer)` with `turbo_arguments(SFTConfig)`.
Both TRL peers run with `gradient_checkpointing=False` (TRL's default is True) and fp32, as the
Trainer peers do, so every peer does the same work.
`--lengths long`: rows of long-tailed lengths up to 4,096, every token labelled (data/long_rows.py); the
model's position limit is raised to 4,096.
"""

from __future__ import annotations

import copy

import torch

from turbotrain.data import stdlib_corpus, train_tokenizer
from turbotrain.data.chat import SftData, build_sft_data
from turbotrain.utils.imports import require

SFT_PEERS = ("stock", "trl", "trl+turbo", "turbo", "turbo-masks")
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def sft_data(workload) -> SftData:
    tokenizer = train_tokenizer(stdlib_corpus(), min(workload.vocab_size, 50265))
    if workload.lengths == "long":
        from turbotrain.data.long_rows import build_long_rows

        return build_long_rows(tokenizer, seed=workload.seed)
    return build_sft_data(tokenizer, workload.seq_len, seed=workload.seed)


def sft_model(workload):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=workload.vocab_size,
        hidden_size=workload.hidden_size,
        num_hidden_layers=workload.num_layers,
        num_attention_heads=workload.num_heads,
        num_key_value_heads=max(1, workload.num_heads // 2),
        intermediate_size=4 * workload.hidden_size,
        max_position_embeddings=max(workload.seq_len, 4096) if workload.lengths == "long" else workload.seq_len,
        tie_word_embeddings=not workload.untied,
        attention_dropout=workload.dropout_probability,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    torch.manual_seed(workload.seed)
    model = Qwen2ForCausalLM(config)
    if not workload.lora:
        return model
    require("peft", "the sft workload's --lora")
    from peft import LoraConfig, get_peft_model

    return get_peft_model(
        model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
    )


def build_sft_trainer(peer: str, model, data: SftData, collator, common: dict):
    """A fresh trainer for an sft peer on a fresh copy of `model`; TRL's collator is counted too."""
    from transformers import Trainer, TrainingArguments

    from turbotrain.args import TurboTrainingArguments, turbo_arguments
    from turbotrain.trainer import TurboTrainer, turbo

    model = copy.deepcopy(model)
    if peer in ("stock", "turbo", "turbo-masks"):
        attention = {"padding_free_attention": "masks"} if peer == "turbo-masks" else {}
        trainer_class, args = (
            (Trainer, TrainingArguments(**common))
            if peer == "stock"
            else (TurboTrainer, TurboTrainingArguments(**common, **attention))
        )
        return trainer_class(model=model, args=args, train_dataset=data.train, data_collator=collator)
    require("trl", f"the sft workload's '{peer}' peer")
    from trl import SFTConfig, SFTTrainer

    config_class, trainer_class = (
        (SFTConfig, SFTTrainer) if peer == "trl" else (turbo_arguments(SFTConfig), turbo(SFTTrainer))
    )
    args = config_class(**common, completion_only_loss=True, gradient_checkpointing=False, max_length=None)
    trainer = trainer_class(model=model, args=args, train_dataset=data.trl_train, processing_class=data.tokenizer)
    collator.inner, trainer.data_collator = trainer.data_collator, collator
    return trainer
