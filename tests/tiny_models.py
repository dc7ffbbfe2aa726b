"""Tiny, randomly initialised models of each family the passes must support (built from configs, no downloads)."""

from __future__ import annotations

import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    DistilBertConfig,
    DistilBertForMaskedLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    RobertaConfig,
    RobertaForMaskedLM,
)

VOCAB = 97  # odd on purpose


def bert():
    return BertForMaskedLM(BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=64))


def roberta():
    return RobertaForMaskedLM(RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=64, max_position_embeddings=70,
                                            pad_token_id=1))


def distilbert():
    return DistilBertForMaskedLM(DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                                  max_position_embeddings=64))


def gpt2():
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                      bos_token_id=0, eos_token_id=0))


def llama():
    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64,
                                        tie_word_embeddings=False))


FAMILIES = {"bert": bert, "roberta": roberta, "distilbert": distilbert, "gpt2": gpt2, "llama": llama}
CAUSAL = {"gpt2", "llama"}


def make(family: str, seed: int = 0, dtype=torch.float32):
    torch.manual_seed(seed)
    return FAMILIES[family]().to(dtype)


def batch(batch_size: int, seq_len: int, keep: float, seed: int = 0, vocab: int = VOCAB):
    """input_ids and labels with roughly `keep` of the labels kept (the rest -100)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, vocab, (batch_size, seq_len), generator=generator)
    labels = input_ids.clone()
    labels[torch.rand(batch_size, seq_len, generator=generator) >= keep] = -100
    return {"input_ids": input_ids, "labels": labels}
