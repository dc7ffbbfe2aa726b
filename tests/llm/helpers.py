"""Shared set-up for the LLM fine-tuning tests: a word-level tokenizer, a tiny Qwen2-shaped decoder and
chat-style prompt/completion rows (built locally, nothing downloaded)."""

from __future__ import annotations

import torch
from datasets import Dataset

WORDS = [f"w{i}" for i in range(90)]
SPECIAL = {"<pad>": 0, "<eos>": 1, "<unk>": 2}


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {**SPECIAL, **{word: i + len(SPECIAL) for i, word in enumerate(WORDS)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def decoder(seed: int = 0, tied: bool = True, vocab: int = len(WORDS) + len(SPECIAL)):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=vocab,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=64,
            tie_word_embeddings=tied,
            pad_token_id=0,
            eos_token_id=1,
            attention_dropout=0.0,
        )
    )


def prompt_completion_rows(n: int = 48, seed: int = 0) -> Dataset:
    """`prompt` / `completion` strings of uneven lengths (2-11 and 1-14 words)."""
    generator = torch.Generator().manual_seed(seed)

    def text(low, high):
        length = int(torch.randint(low, high, (1,), generator=generator))
        return " ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (length,), generator=generator))

    return Dataset.from_list([{"prompt": text(2, 12), "completion": text(1, 15)} for _ in range(n)])


def lora_config(modules_to_save=None):
    from peft import LoraConfig

    return LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "v_proj", "gate_proj", "down_proj"],
        modules_to_save=modules_to_save,
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )


def record_op_calls(monkeypatch, note) -> list:
    """Every run of the per-row chunked log-prob op (passes/chunked_ce/logprobs.py), as `note(args)` makes it from the
    op's positional arguments (hidden, weight, bias, targets, softcap, chunk_rows, want_stats, 1 / temperature)."""
    from turbotrain.passes.chunked_ce import logprobs

    calls = []
    original = logprobs.LinearLogProbs.apply

    def noted(*args):
        calls.append(note(args))
        return original(*args)

    monkeypatch.setattr(logprobs.LinearLogProbs, "apply", noted)
    return calls
