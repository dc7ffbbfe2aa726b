"""Padding-free inside TRL's scored calls (passes/padding_free/scored_calls.py): a right-padded `fused_lm_head`
call answered by label sparsity runs as one packed row; its answer (log-probs, entropy, top-1, mean logits, at
[B, T - 1]) and every gradient equal the padded call's, windows shorter than the rows included."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.passes.test_packed_attention import OLD_RELEASE, WINDOW, _model
from tests.tiny_models import padded_batch
from turbotrain import optimize
from turbotrain.passes.padding_free import scored_calls
from turbotrain.passes.padding_free.scored_calls import layout_of, pack_scored_calls
from turbotrain.passes.registry import TrainerFacts
from turbotrain.utils.batch_keys import ATTENTION_SEQUENCES

pytestmark = pytest.mark.skipif(OLD_RELEASE, reason="no packed attention on this Transformers release")
LENGTHS = [23, 4, 17, 1, 11, 23]  # uneven, one of a single token; rows outrun the window of 8


def _answered(model, packed: bool = False):
    """`model` with label sparsity answering per-row fused calls through the chunked head, as for DPOTrainer, and
    `packed`: padding-free packing them inside each call (its variant for a trainer whose scored calls it packs)."""
    facts = TrainerFacts(sums_tokens=False, fused_call_weighting="per_row", packs_scored_calls=True)
    return optimize(
        model, padding_free=packed, embedding_grad=False, fused_activation=False, chunked_cross_entropy="always",
        facts=facts,
    )  # fmt: skip


def _scored_call(model, batch):
    """One fused call as TRL's DPOTrainer makes it; returns its answer and a DPO-like weighted sum's gradients."""
    model.zero_grad()
    out = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"],
        use_cache=False, fused_lm_head=True,
    )  # fmt: skip
    weights = torch.linspace(0.5, 2.0, out.log_probs.shape[0])[:, None]  # a factor per row (DPO's sigmoid)
    (out.log_probs * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    fields = ("log_probs", "entropy", "is_top1", "label_mask", "mean_logits")
    return {f: getattr(out, f).detach() for f in fields if getattr(out, f, None) is not None}, grads


def assert_gradients_close(expected: dict, got: dict, rtol: float = 1e-5) -> None:
    """The same parameters have gradients, each within `rtol` of its largest value (float summation order)."""
    assert expected.keys() == got.keys()
    for name, value in expected.items():
        assert (got[name] - value).abs().max() / value.abs().max().clamp_min(1e-12) <= rtol, name


def _pair(family):
    stock = _model(family, "lm")
    packed = copy.deepcopy(stock)
    stock_report, report = _answered(stock), _answered(packed, packed=True)
    assert stock_report.label_sparsity.chunked_head.fused_weighting == "per_row"
    assert report.padding_free is not None
    return stock, packed, report


def _packed_calls(monkeypatch) -> list[int]:
    tokens = []
    original = scored_calls.PackedScoredCalls.pack

    def recorded(self, *args):
        packed = original(self, *args)
        tokens.append(None if packed is None else packed[2])
        return packed

    monkeypatch.setattr(scored_calls.PackedScoredCalls, "pack", recorded)
    return tokens


@pytest.mark.parametrize("family", ["qwen2", "mistral", "llama", "gemma2"])  # GQA; window 8; plain; soft-cap
def test_a_packed_scored_call_answers_as_the_padded_one(family, monkeypatch):
    stock, packed, report = _pair(family)
    assert report.padding_free is report.label_sparsity.call_packer
    batch = padded_batch(LENGTHS, keep=0.6, pad_token_id=stock.config.pad_token_id or 0)
    tokens = _packed_calls(monkeypatch)
    expected, expected_grads = _scored_call(stock, batch)
    got, grads = _scored_call(packed, batch)
    assert tokens == [sum(LENGTHS)]  # one packed row of the real tokens only
    assert expected.keys() == got.keys() and "entropy" in got
    for field, value in expected.items():
        torch.testing.assert_close(got[field].float(), value.float(), rtol=1e-5, atol=1e-6, msg=field)
    assert_gradients_close(expected_grads, grads)


def test_published_qwen2_5_0_5b_heads_with_its_window_set_below_the_rows(monkeypatch):
    # Qwen2.5-0.5B's attention shape (896 hidden, 14 heads of 64, 2 KV heads, q/k/v bias, RoPE theta 1M), two
    # layers and a small vocabulary; its sliding window (off in the published config) turned on at 8 tokens
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=211, hidden_size=896, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=14,
        num_key_value_heads=2, rope_theta=1_000_000.0, max_position_embeddings=128, use_sliding_window=True,
        sliding_window=WINDOW, max_window_layers=0, pad_token_id=0, attention_dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    stock = Qwen2ForCausalLM(config)
    assert stock.config.layer_types == ["sliding_attention"] * 2
    packed = copy.deepcopy(stock)
    _answered(stock)
    assert _answered(packed, packed=True).padding_free is not None
    batch = padded_batch(LENGTHS, keep=0.6)
    tokens = _packed_calls(monkeypatch)
    (expected, expected_grads), (got, grads) = _scored_call(stock, batch), _scored_call(packed, batch)
    assert tokens == [sum(LENGTHS)]
    torch.testing.assert_close(got["log_probs"], expected["log_probs"], rtol=1e-5, atol=1e-5)
    assert_gradients_close(expected_grads, grads)


@pytest.mark.parametrize("family", ["qwen2", "gpt2"])  # rotary; learned absolute positions
def test_a_left_padded_call_is_packed_at_the_positions_stock_gives_it(family, monkeypatch):
    # GRPO's and RLOO's rows: a left-padded prompt, then the completion; each token keeps its padded index
    stock, packed, _ = _pair(family)
    batch = padded_batch(LENGTHS, keep=0.6, left=True)
    first = batch["attention_mask"].argmax(dim=1)  # each row's first real token: a prompt token, never scored
    batch["labels"][torch.arange(len(LENGTHS)), first] = -100  # (its score would be read at a padding position)
    tokens = _packed_calls(monkeypatch)
    (expected, expected_grads), (got, grads) = _scored_call(stock, batch), _scored_call(packed, batch)
    assert tokens == [sum(LENGTHS)]
    torch.testing.assert_close(got["log_probs"], expected["log_probs"], rtol=1e-5, atol=1e-6)
    assert_gradients_close(expected_grads, grads)


def test_a_row_whose_tokens_are_not_one_block_stays_padded_with_the_same_answer(monkeypatch):
    stock, packed, _ = _pair("mistral")  # window 8: the hole would count in the padded row, not in a packed one
    batch = padded_batch(LENGTHS, keep=0.6)
    batch["attention_mask"][0, 5:9] = 0  # a hole inside the first row
    batch["labels"][0, 5:9] = -100
    tokens = _packed_calls(monkeypatch)
    (expected, _), (got, _) = _scored_call(stock, batch), _scored_call(packed, batch)
    assert tokens == [None]
    torch.testing.assert_close(got["log_probs"], expected["log_probs"], rtol=1e-5, atol=1e-6)


def test_layout_of_a_padded_call():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    ids = torch.arange(12).view(3, 4)
    layout, why = layout_of((), {"input_ids": ids, "attention_mask": mask, "use_cache": False})
    assert why is None and layout.tokens == 8
    call = layout.call({"input_ids": ids, "attention_mask": mask, "use_cache": True})
    assert call["input_ids"].tolist() == [[0, 1, 2, 4, 8, 9, 10, 11]]
    assert call["position_ids"].tolist() == [[0, 1, 2, 0, 0, 1, 2, 3]]
    assert call["cu_seq_lens_q"].tolist() == [0, 3, 4, 8] and call["max_length_q"] == 4
    assert "attention_mask" not in call and call["use_cache"] is False
    assert layout.packed_rows(torch.tensor([1, 8, 10])).tolist() == [1, 4, 6]
    assert layout.packed_rows(torch.tensor([3])) is None  # a padding position
    left = torch.tensor([[0, 1, 1], [1, 1, 0], [0, 1, 0]])  # left, right and both sides padded
    layout, _ = layout_of((), {"input_ids": torch.arange(9).view(3, 3), "attention_mask": left})
    call = layout.call({"input_ids": torch.arange(9).view(3, 3), "attention_mask": left})
    assert call["input_ids"].tolist() == [[1, 2, 3, 4, 7]]
    assert call["position_ids"].tolist() == [[1, 2, 0, 1, 1]]  # each token's index in its padded row


@pytest.mark.parametrize(
    "args,kwargs,reason",
    [
        ((torch.ones(2, 3),), {}, "by keyword"),
        ((), {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.tensor([[1, 0, 1], [1, 1, 1]])},
         "one block"),
        ((), {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3),
              "position_ids": torch.arange(3).expand(2, 3)}, "position_ids"),
        ((), {"input_ids": torch.ones(1, 2, dtype=torch.long), "attention_mask": torch.zeros(1, 2)}, "no real token"),
    ],
)  # fmt: skip
def test_calls_that_stay_padded_say_why(args, kwargs, reason):
    layout, why = layout_of(args, kwargs)
    assert layout is None and reason in why


def test_a_model_with_dropout_is_refused():
    model = _model("qwen2", "lm")
    for layer in model.model.layers:  # what the attention modules read in training
        layer.self_attn.attention_dropout = 0.1
    packer, why = pack_scored_calls(model)
    assert packer is None and "dropout" in why


def test_the_self_check_refuses_a_packed_forward_that_differs(monkeypatch):
    model = _model("qwen2", "lm")
    original = scored_calls.PackedLayout.call
    monkeypatch.setattr(  # a wrong call: no sequences, so each token attends to the whole row before it
        scored_calls.PackedLayout, "call",
        lambda self, kwargs: {k: v for k, v in original(self, kwargs).items() if k != ATTENTION_SEQUENCES},
    )  # fmt: skip
    packer, why = pack_scored_calls(model)
    assert packer is None and "differ" in why
    assert model.config._attn_implementation == "sdpa"  # switched back


def test_a_model_the_policy_stands_for_runs_no_forward_at_install(monkeypatch):
    """The reference model (`check=False`: the policy's class and configuration) is neither self-checked nor
    probed by a forward: a forward reads every weight, and a reference loaded from a file (GRPO's) would be mapped
    into memory whole before training begins. Its cheap refusals still apply (dropout read from its modules)."""
    from turbotrain import modeling

    model = _model("qwen2", "lm")
    forwards = []
    model.model.register_forward_hook(lambda *_: forwards.append(1))
    packer, why = pack_scored_calls(model, check=False)
    assert packer is not None and why is None and forwards == []
    packer.remove()
    monkeypatch.setattr(modeling, "draws_at_random", lambda model: pytest.fail("probed"))
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = 0.1
    packer, why = pack_scored_calls(model, check=False)
    assert packer is None and "dropout" in why
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = 0.0
    monkeypatch.undo()
    packer, why = pack_scored_calls(model)  # checked: the self-check's forwards run
    assert packer is not None and forwards
