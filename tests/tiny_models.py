"""Tiny, randomly initialised models of each family the passes must support (built from configs, no downloads)."""

from __future__ import annotations

import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertForTokenClassification,
    DistilBertConfig,
    DistilBertForMaskedLM,
    DistilBertForSequenceClassification,
    DistilBertForTokenClassification,
    GPT2Config,
    GPT2ForSequenceClassification,
    GPT2ForTokenClassification,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    LlamaForTokenClassification,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
)

VOCAB = 97  # odd on purpose
NUM_LABELS = 3
ENCODER = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)  # BERT-like sizes


def decoder_config(config_class=LlamaConfig, hidden=32, layers=2, heads=4, kv_heads=2, width=64, **changes):
    """A tiny decoder's config (Llama-shaped by default; Qwen2, Gemma2... by `config_class`): VOCAB, hidden 32,
    2 layers, 4 heads over 2 key-value heads, MLP width 64, 128 positions, untied head, pad 0; `changes` for the
    rest. The one place the tests' tiny decoder sizes are written."""
    sizes = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=width)
    defaults = dict(vocab_size=VOCAB, max_position_embeddings=128, tie_word_embeddings=False, pad_token_id=0)
    return config_class(**sizes, num_key_value_heads=kv_heads, **{**defaults, **changes})


CONFIGS = {
    "bert": (
        BertConfig,
        dict(ENCODER, max_position_embeddings=128),
        dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    ),
    "roberta": (
        RobertaConfig,
        dict(ENCODER, max_position_embeddings=130, pad_token_id=1),
        dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    ),
    "distilbert": (
        DistilBertConfig,
        dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=128),
        dict(dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0),
    ),
    "gpt2": (
        GPT2Config,
        dict(n_embd=32, n_layer=2, n_head=4, n_positions=128, bos_token_id=0, eos_token_id=0, pad_token_id=0),
        dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, classifier_dropout=0.0),
    ),
    "llama": (decoder_config, {}, dict(attention_dropout=0.0, classifier_dropout=0.0)),
}
LM_CLASSES = {
    "bert": BertForMaskedLM,
    "roberta": RobertaForMaskedLM,
    "distilbert": DistilBertForMaskedLM,
    "gpt2": GPT2LMHeadModel,
    "llama": LlamaForCausalLM,
}
CLS_CLASSES = {
    "bert": BertForSequenceClassification,
    "roberta": RobertaForSequenceClassification,
    "distilbert": DistilBertForSequenceClassification,
    "gpt2": GPT2ForSequenceClassification,
    "llama": LlamaForSequenceClassification,
}
TOKEN_CLASSES = {
    "bert": BertForTokenClassification,
    "roberta": RobertaForTokenClassification,
    "distilbert": DistilBertForTokenClassification,
    "gpt2": GPT2ForTokenClassification,
    "llama": LlamaForTokenClassification,
}
CLASSES = {"lm": LM_CLASSES, "cls": CLS_CLASSES, "tok": TOKEN_CLASSES}  # task -> family -> model class
FAMILIES = sorted(CONFIGS)
CAUSAL = {"gpt2", "llama"}
ENCODERS = sorted(set(FAMILIES) - CAUSAL)


def make(
    family: str,
    seed: int = 0,
    dtype=torch.float32,
    task: str = "lm",
    dropout: bool = True,
    num_labels: int = NUM_LABELS,
):
    config_class, sizes, no_dropout = CONFIGS[family]
    config = config_class(vocab_size=VOCAB, num_labels=num_labels, **sizes, **({} if dropout else no_dropout))
    torch.manual_seed(seed)
    model_class = CLASSES[task][family]
    return model_class(config).to(dtype)


def batch(batch_size: int, seq_len: int, keep: float, seed: int = 0, vocab: int = VOCAB):
    """input_ids and labels with roughly `keep` of the labels kept (the rest -100)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, vocab, (batch_size, seq_len), generator=generator)
    labels = input_ids.clone()
    labels[torch.rand(batch_size, seq_len, generator=generator) >= keep] = -100
    return {"input_ids": input_ids, "labels": labels}


def padded_batch(
    lengths: list[int], task: str = "lm", keep: float = 0.3, seed: int = 0, pad_token_id: int = 0, left: bool = False
):
    """A right- (or left-) padded batch of sequences with the given lengths, as a padding collator makes."""
    generator = torch.Generator().manual_seed(seed)
    longest = max(lengths)
    positions = torch.arange(longest)[None, :]
    length = torch.tensor(lengths)[:, None]
    mask = positions >= longest - length if left else positions < length
    input_ids = torch.randint(3, VOCAB, (len(lengths), longest), generator=generator)
    input_ids[~mask] = pad_token_id
    if task == "cls":
        labels = torch.randint(0, NUM_LABELS, (len(lengths),), generator=generator)
    elif task == "tok":  # one of NUM_LABELS classes per real token
        labels = torch.randint(0, NUM_LABELS, tuple(input_ids.shape), generator=generator).masked_fill(~mask, -100)
    else:
        labels = input_ids.clone()
        labels[(torch.rand(labels.shape, generator=generator) >= keep) | ~mask] = -100
    return {"input_ids": input_ids, "attention_mask": mask.long(), "labels": labels}


LLM_VOCAB = 151_936  # Qwen2's vocabulary: the size where full logits hurt


def llm(vocab: int = LLM_VOCAB, tied: bool = True, seed: int = 0, softcap: float | None = None, hidden: int = 16):
    """A one-layer Qwen2-shaped decoder (Gemma-2 with `softcap`) with a large vocabulary and a tiny body."""
    from transformers import Gemma2Config, Gemma2ForCausalLM, Qwen2Config, Qwen2ForCausalLM

    sizes = dict(hidden=hidden, layers=1, heads=2, kv_heads=1, width=2 * hidden, vocab_size=vocab)
    sizes.update(tie_word_embeddings=tied, attention_dropout=0.0)
    torch.manual_seed(seed)
    if softcap is not None:
        return Gemma2ForCausalLM(
            decoder_config(Gemma2Config, **sizes, head_dim=hidden // 2, final_logit_softcapping=softcap)
        )
    return Qwen2ForCausalLM(decoder_config(Qwen2Config, **sizes))


def as_user_subclass(model):
    """The same weights in a user's own subclass of the model's class (defined outside Transformers)."""

    class UserModel(type(model)):
        pass

    subclassed = UserModel(model.config)
    subclassed.load_state_dict(model.state_dict())
    return subclassed


def phimoe(seed: int = 0):
    """A tiny PhiMoE causal LM: no dropout, but its expert routing samples in training (sparsemixer)."""
    from transformers import PhimoeConfig, PhimoeForCausalLM

    sizes = dict(hidden=16, width=32, layers=1, heads=2, kv_heads=2, max_position_embeddings=64)
    experts = dict(num_local_experts=4, num_experts_per_tok=2)
    config = decoder_config(PhimoeConfig, **sizes, **experts, attention_dropout=0.0, pad_token_id=None)
    torch.manual_seed(seed)
    return PhimoeForCausalLM(config)
