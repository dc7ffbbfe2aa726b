"""Padded and packed forms of the same batch give the same loss and gradients, for every family and task."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from tests.parity import assert_same, loss_and_grads
from tests.tiny_models import CAUSAL, ENCODERS, FAMILIES, make, padded_batch
from turbotrain import optimize
from turbotrain.passes.padding_free.packing import SEQUENCE_STARTS, PackingSpec, pack_batch, plan_rows
from turbotrain.utils.warnings import TurbotrainWarning

SHAPES = {
    "odd": [5, 37, 1, 12],
    "one_long_many_short": [100, 1, 2, 3, 1, 5, 2, 1, 7],
    "all_length_one": [1, 1, 1],
}
# "tok": token classification, whose labels are classes, not token ids; padded_and_packed asserts that
# the pass applies (its self-check once fed token ids as labels, so it never did).
CASES = [(f, "lm") for f in FAMILIES] + [(f, "cls") for f in ENCODERS] + [(f, "tok") for f in FAMILIES]


def padded_and_packed(family, task, lengths, attention="packed", **batch_kw):
    model = make(family, task=task, dropout=False)
    report = optimize(model, label_sparsity=False, padding_free_attention=attention)
    assert report.padding_free is not None, f"padding-free did not apply to {family} {task}"
    padded = padded_batch(lengths, task=task, pad_token_id=report.padding_free.spec.pad_token_id, **batch_kw)
    packed = report.collator(lambda features: features)(dict(padded))
    return model, padded, packed


@pytest.mark.parametrize("family,task", CASES)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_packed_loss_and_grads_match_padded(family, task, shape):
    model, padded, packed = padded_and_packed(family, task, SHAPES[shape])
    assert packed["input_ids"].numel() < padded["input_ids"].numel() or shape == "all_length_one"
    model.eval()  # no dropout: the packed tensors have other shapes, so dropout would draw other masks
    assert_same(loss_and_grads(model, padded), loss_and_grads(model, packed), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("is_decoder", [False, True])
def test_an_encoders_causal_lm_head_packs_with_the_attention_it_has(is_decoder):
    from transformers import BertConfig, BertLMHeadModel

    config = BertConfig(
        vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, is_decoder=is_decoder,
    )  # fmt: skip
    torch.manual_seed(0)
    model = BertLMHeadModel(config)
    report = optimize(model, label_sparsity=False)
    assert report.padding_free is not None and report.padding_free.spec.causal == is_decoder
    padded = padded_batch(SHAPES["odd"], keep=1.0)
    packed = report.collator(lambda features: features)(dict(padded))
    assert_same(loss_and_grads(model, padded), loss_and_grads(model, packed), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model_type", ["convbert", "mobilebert"])
def test_models_that_mix_tokens_outside_attention_stay_padded(model_type):
    # ConvBERT's convolution read the packed neighbours: the architecture sweep's convbert token-cls 3e-4 off
    from scripts.architectures import build

    with pytest.warns(TurbotrainWarning, match="read tokens its attention mask hides"):
        report = optimize(build(model_type, "token-cls"), label_sparsity=False)
    assert report.padding_free is None


@pytest.mark.parametrize("model_type", ["jamba", "lara_mini"])
def test_models_that_carry_state_along_the_row_stay_padded(model_type):
    # Jamba's Mamba layers and Lara's linear attention carried the first packed sequence into the second:
    # the architecture sweep's jamba causal-lm 1e-5 loss, 0.3 gradient off, below the loss self-check
    from scripts.architectures import Skip, build

    try:
        model = build(model_type, "causal-lm")
    except Skip as reason:
        pytest.skip(f"{model_type} not built by this Transformers: {reason}")
    model.config.use_cache = False  # Jamba's eval forward otherwise builds a cache its tiny layout cannot size
    try:
        model(**padded_batch([5, 3], keep=1.0))
    except Exception as error:  # Transformers 5.0's Jamba needs CUDA Mamba kernels even on CPU
        pytest.skip(f"{model_type} cannot train on this device with this Transformers: {str(error)[:80]}")
    # the per-token self-check sees the leak first (outputs differ); `carries_state` is the probe behind it
    with pytest.warns(
        TurbotrainWarning, match="state carried along the row|packed outputs differ|packed loss .* differs"
    ):
        report = optimize(model)
    assert report.padding_free is None


def test_left_padded_batch_stays_padded_with_a_warning():
    padded = padded_batch(SHAPES["odd"], left=True)
    with pytest.warns(TurbotrainWarning, match="left-padded"):
        assert pack_batch(padded, PackingSpec(causal=False, pad_token_id=0)) is padded


@pytest.mark.parametrize("family", FAMILIES)
def test_padding_free_with_label_sparsity_in_training_mode(family):
    stock = make(family, dropout=False)
    fast = copy.deepcopy(stock)
    report = optimize(fast)
    assert {"label_sparsity", "padding_free"} <= set(report.applied)
    padded = padded_batch(SHAPES["one_long_many_short"], pad_token_id=report.padding_free.spec.pad_token_id, keep=0.4)
    packed = report.collator(lambda features: features)(dict(padded))
    stock.train(), fast.train()
    assert_same(loss_and_grads(stock, padded), loss_and_grads(fast, packed), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_bf16_packed_matches_padded_loosely(family):
    model, padded, packed = padded_and_packed(family, "lm", SHAPES["odd"])
    model.to(torch.bfloat16).eval()
    assert_same(loss_and_grads(model, padded), loss_and_grads(model, packed), rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize("attention", ["masks", "packed"])
@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_eager_attention_takes_the_mask_as_additive(family, attention):
    # switched to eager after install: masks become additive; packed attention follows onto eager's own code
    model, padded, packed = padded_and_packed(family, "lm", SHAPES["odd"], attention)
    model.set_attn_implementation("eager")
    model.eval()
    assert_same(loss_and_grads(model, padded), loss_and_grads(model, packed), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", sorted(CAUSAL))
def test_decoder_sequence_classification_is_refused_with_a_warning(family):
    with pytest.warns(TurbotrainWarning, match="decoder sequence classification"):
        report = optimize(make(family, task="cls"), label_sparsity=False)
    assert report.padding_free is None and report.skipped == ["padding_free"]


def test_pack_batch_layout():
    padded = padded_batch([3, 1, 4], pad_token_id=0)
    packed = pack_batch(padded, PackingSpec(causal=True, pad_token_id=0, position_offset=2, multiple_of=4))
    assert packed["input_ids"].shape == (2, 4)  # rows [4], [3 + 1]: longest first
    assert packed["position_ids"].tolist() == [[2, 3, 4, 5], [2, 3, 4, 2]]
    assert packed[SEQUENCE_STARTS].tolist() == [4, 7, 0]  # in batch order
    assert packed["input_ids"].view(-1)[4:7].tolist() == padded["input_ids"][0, :3].tolist()
    assert packed["labels"].view(-1)[packed[SEQUENCE_STARTS]].eq(-100).all()  # no prediction across sequences
    mask = packed["attention_mask"][1, 0]
    assert mask[3, :3].sum() == 0 and mask[2, :3].tolist() == [True, True, True] and not mask[0, 1]


def test_unpadded_batch_is_left_alone():
    batch = {"input_ids": torch.ones(2, 5, dtype=torch.long), "attention_mask": torch.ones(2, 5, dtype=torch.long)}
    assert pack_batch(batch, PackingSpec(causal=False, pad_token_id=0)) is batch


@pytest.mark.parametrize(
    "lengths,capacity,expected",
    [
        ([3, 1, 4], 4, [(1, 0), (1, 3), (0, 0)]),
        ([4, 4, 4], 4, [(0, 0), (1, 0), (2, 0)]),
        ([1, 1, 1, 1], 8, [(0, 0), (0, 1), (0, 2), (0, 3)]),
        ([2, 5, 3, 6], 8, [(0, 6), (1, 0), (1, 5), (0, 0)]),
    ],
)
def test_plan_rows_first_fit_decreasing(lengths, capacity, expected):
    assert plan_rows(lengths, capacity) == expected


@pytest.mark.parametrize("task", ["lm", "cls", "tok"])
def test_dropout_on_is_refused_unless_asked_and_dropout_off_is_silent(task, monkeypatch):
    # run_glue.py, run_ner.py and TRL's sft.py with the configs' default dropout gave losses ~1e-2 from stock
    # with no word: packed rows draw other dropout masks. So dropout on means padded batches, unless asked.
    import turbotrain.utils.warnings as turbo_warnings
    from turbotrain.passes.padding_free import apply_padding_free

    monkeypatch.setattr(turbo_warnings, "_already_warned", set())
    with pytest.warns(TurbotrainWarning, match=r"dropout \(p=0\.1\).*padding_free_with_dropout=True"):
        assert apply_padding_free(make("roberta", task=task)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", TurbotrainWarning)
        assert apply_padding_free(make("roberta", task=task), with_dropout=True) is not None
        assert apply_padding_free(make("roberta", task=task, dropout=False)) is not None


def test_a_model_drawing_random_numbers_in_training_is_refused_unless_asked():
    # the architecture sweep's one difference: PhiMoE samples experts in training, packed rows drew otherwise
    from tests.tiny_models import phimoe
    from turbotrain.passes.padding_free import apply_padding_free

    with pytest.warns(TurbotrainWarning, match=r"random draws.*padding_free_with_dropout=True"):
        assert apply_padding_free(phimoe()) is None
    assert apply_padding_free(phimoe(), with_dropout=True) is not None
