"""packed_sequences.OncePerForward: a mask made from a forward's segments is made once for all its layers, never
kept past the forward, and made again for other segments, for the same tensor changed in place, outside a packed
forward (a checkpointed layer recomputed in the backward) and while compiling."""

from __future__ import annotations

import pytest
import torch

from tests.passes.test_packed_attention import OLD_RELEASE
from turbotrain.passes.padding_free import packed_sequences
from turbotrain.passes.padding_free.packed_sequences import OncePerForward


@pytest.fixture
def made():
    calls = []
    memo = OncePerForward(lambda cu, n: calls.append(n) or cu.float().sum() + n)
    yield memo, calls
    packed_sequences._MEMOS.remove(memo)


def test_made_once_a_forward_and_forgotten_after_it(made):
    memo, calls = made
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    packed_sequences.forward_begins()
    try:
        first = memo(cu, 2)
        assert memo(cu, 2) is first and calls == [2]  # every layer of the forward: one make
        memo(cu, 3)  # another argument
        memo(torch.tensor([0, 3, 7], dtype=torch.int32), 3)  # equal values, another tensor
        cu.add_(0)  # changed in place: its version moved
        memo(cu, 3)
        assert calls == [2, 3, 3, 3]
        answer = memo(cu, 3)
        answer.add_(1)  # an answer changed in place is made again
        memo(cu, 3)
        assert calls == [2, 3, 3, 3, 3]
    finally:
        packed_sequences.forward_ends()
    assert memo.entry is None  # nothing kept past the forward
    memo(cu, 3)
    memo(cu, 3)
    assert calls == [2, 3, 3, 3, 3, 3, 3]  # outside a packed forward: each call makes its own


def test_a_compiled_region_makes_its_own(made, monkeypatch):
    memo, calls = made
    cu = torch.tensor([0, 4], dtype=torch.int32)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    packed_sequences.forward_begins()
    try:
        memo(cu, 1)
        memo(cu, 1)
    finally:
        packed_sequences.forward_ends()
    assert calls == [1, 1]


def test_a_forward_whose_end_was_missed_leaves_nothing_to_the_next(made):
    memo, calls = made
    cu = torch.tensor([0, 5], dtype=torch.int32)
    packed_sequences.forward_begins()  # its end does not come (where always_call hooks do not run)
    memo(cu, 1)
    packed_sequences.forward_begins()
    assert memo.entry is None  # forgotten at the next forward's start
    packed_sequences.forward_ends()
    assert packed_sequences._open_forwards.get() == 1
    packed_sequences.forward_ends()  # the missed one ended late (OptimizeReport.end_forward): counted down
    packed_sequences.forward_ends()  # never below none
    assert packed_sequences._open_forwards.get() == 0


@pytest.mark.skipif(OLD_RELEASE, reason="no packed attention on this Transformers release")
def test_a_packed_model_forward_builds_the_row_mask_once_for_all_its_layers(monkeypatch):
    from tests.parity import assert_same, loss_and_grads
    from tests.passes.test_kernel_choice import _packed_pair
    from turbotrain.passes.padding_free import attention_kernels, kernel_choice

    monkeypatch.setitem(attention_kernels.ROW_MASK_MAX_WASTE, "cpu", 1e9)
    stock, model, report, padded, packed = _packed_pair("qwen2")
    built = []
    make = attention_kernels._block_mask.make
    monkeypatch.setattr(attention_kernels._block_mask, "make", lambda *a: built.append(1) or make(*a))
    with kernel_choice.forced("row_mask"):
        got = loss_and_grads(model, packed)
    assert len(built) == 1 and model.config.num_hidden_layers > 1
    assert attention_kernels._block_mask.answer is None  # not held after the step's forward
    assert_same(loss_and_grads(stock, padded), got, rtol=1e-5, atol=1e-6)
