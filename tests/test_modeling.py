"""`turbotrain.modeling`: the one place that tells what a model is (task, causal, positions) and makes its
synthetic batches; every pass and the exporter ask it."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    BertConfig,
    BertForTokenClassification,
    T5Config,
    T5ForConditionalGeneration,
)

from tests.tiny_models import CAUSAL, FAMILIES, NUM_LABELS, VOCAB, make, phimoe
from turbotrain import modeling


@pytest.mark.parametrize("family", FAMILIES)
def test_language_models_and_classifiers(family):
    expected = modeling.CAUSAL_LM if family in CAUSAL else modeling.MASKED_LM
    assert modeling.task_of(make(family)) == expected
    assert modeling.task_of(make(family, task="cls")) == modeling.SEQUENCE_CLASSIFICATION
    assert modeling.is_causal_lm(make(family)) == (family in CAUSAL)
    assert modeling.has_causal_attention(make(family, task="cls")) == (family in CAUSAL)


@pytest.mark.parametrize("family", ["bert", "big_bird"])  # BigBird's layers carry is_decoder, not is_causal
@pytest.mark.parametrize("is_decoder", [False, True])
def test_an_encoders_causal_lm_head_attends_as_its_config_says(family, is_decoder):
    # BertLMHeadModel without is_decoder: Transformers warns and attends both ways; its loss still shifts
    # (was: packed with a causal mask, the architecture sweep's bert and big_bird causal-lm gradients 0.4 off)
    config = AutoConfig.for_model(
        family, vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, is_decoder=is_decoder
    )
    model = AutoModelForCausalLM.from_config(config)
    assert modeling.is_causal_lm(model)
    assert modeling.has_causal_attention(model) == is_decoder


def test_a_users_subclass_keeps_its_parents_task():
    class MyRoberta(type(make("roberta"))):
        pass

    assert modeling.task_of(MyRoberta(make("roberta").config)) == modeling.MASKED_LM


def test_seq2seq_and_unknown_models():
    t5 = T5ForConditionalGeneration(
        T5Config(vocab_size=VOCAB, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2, decoder_start_token_id=0)
    )
    assert modeling.task_of(t5) == modeling.SEQ2SEQ_LM and not modeling.is_causal_lm(t5)
    assert modeling.task_of(nn.Linear(2, 2)) is None


def test_positions_start_after_robertas_padding_index():
    assert modeling.position_offset(make("roberta")) == make("roberta").config.pad_token_id + 1
    assert modeling.position_offset(make("bert")) == 0


@pytest.mark.requires_llm
def test_peft_wrappers_are_seen_through():
    import peft

    model = peft.get_peft_model(make("llama"), peft.LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    assert modeling.is_peft_model(model) and modeling.unwrap(model) is model.get_base_model()
    assert modeling.task_of(model) == modeling.CAUSAL_LM and modeling.vocab_size(model) == VOCAB


def test_synthetic_labels_fit_the_task():
    lm = modeling.synthetic_batch(make("bert"), [6, 2, 9], seed=0, ignore_every=3)
    assert lm["input_ids"].shape == (3, 9) and lm["attention_mask"].sum().item() == 17
    assert (lm["labels"][lm["attention_mask"] == 0] == modeling.IGNORE_INDEX).all()
    assert (lm["labels"][:, ::3] == modeling.IGNORE_INDEX).all()
    token = BertForTokenClassification(
        BertConfig(
            vocab_size=VOCAB,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            num_labels=NUM_LABELS,
        )
    )
    labels = modeling.synthetic_batch(token, [5, 3], seed=0)["labels"]
    assert labels.max().item() < NUM_LABELS  # class ids, not token ids
    classes = modeling.synthetic_batch(make("roberta", task="cls"), [4, 4], seed=0)["labels"]
    assert classes.shape == (2,) and classes.max().item() < NUM_LABELS


def test_synthetic_batches_are_deterministic_and_leave_the_global_rng_alone():
    model = make("gpt2")
    torch.manual_seed(3)
    before = torch.rand(1)
    torch.manual_seed(3)
    first = modeling.synthetic_batch(model, [4, 7], seed=11)
    assert torch.rand(1).item() == before.item()
    second = modeling.synthetic_batch(model, [4, 7], seed=11)
    assert all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.parametrize("model_type", ["mpt", "bloom"])
def test_a_decoder_without_attention_flags_is_causal_whatever_its_head(model_type):
    # MPT's and BLOOM's layers carry no is_causal flag: a forward probe says their token classifier is causal
    # (was: taken from the head, non-causal, so packed rows would have attended ahead)
    from scripts.architectures import build

    model = build(model_type, "token-cls")
    assert modeling.attends_ahead(model) is False
    assert modeling.has_causal_attention(model)


@pytest.mark.parametrize(
    "model_type,reads", [("bert", False), ("llama", False), ("convbert", True), ("mobilebert", True)]
)
def test_models_whose_outputs_read_masked_positions(model_type, reads):
    # ConvBERT's span convolution and MobileBERT's trigram embedding read neighbours outside attention
    from scripts.architectures import build

    assert modeling.reads_masked_positions(build(model_type, "token-cls")) is reads


@pytest.mark.parametrize(
    "build,expected",
    [
        (phimoe, True),  # sampled expert routing: draws even where, at this input, the draw changes nothing
        (lambda: make("bert"), True),  # dropout 0.1
        (lambda: make("bert", dropout=False), False),  # SDPA runs with dropout_p=0: no draw
        (lambda: make("llama", dropout=False), False),
    ],
)
def test_draws_at_random_in_training(build, expected):
    model = build().eval()
    state = torch.random.get_rng_state()
    assert modeling.draws_at_random(model) is expected
    assert torch.equal(state, torch.random.get_rng_state())  # the caller's stream is untouched
    assert not model.training and all(p.grad is None for p in model.parameters())
