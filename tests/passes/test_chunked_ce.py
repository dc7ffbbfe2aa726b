"""Chunked linear cross-entropy gives the dense head's loss and every gradient (fp32, 1e-5 relative)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from tests.parity import assert_same_relative_to_scale, loss_and_grads
from tests.tiny_models import LLM_VOCAB, VOCAB, llm
from turbotrain import optimize
from turbotrain.modeling import synthetic_batch
from turbotrain.passes.chunked_ce import linear_cross_entropy


def dense_and_chunked(rows, vocab, hidden, bias, softcap, chunk_rows, seed=0):
    generator = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, hidden, generator=generator)
    weight = torch.randn(vocab, hidden, generator=generator) * 0.05
    b = torch.randn(vocab, generator=generator) if bias else None
    targets = torch.randint(0, vocab, (rows,), generator=generator)
    results = []
    for chunked in (False, True):
        leaves = [t.clone().requires_grad_() for t in (h, weight, *([b] if bias else []))]
        if chunked:
            nll = linear_cross_entropy(
                leaves[0], leaves[1], leaves[2] if bias else None, targets, softcap=softcap, chunk_rows=chunk_rows
            )
        else:
            z = F.linear(leaves[0], leaves[1], leaves[2] if bias else None).float()
            z = softcap * torch.tanh(z / softcap) if softcap else z
            nll = F.cross_entropy(z, targets, reduction="none")
        loss = nll.sum() / max(rows, 1)
        loss.backward()
        results.append((loss.detach(), [leaf.grad for leaf in leaves]))
    return results


@pytest.mark.parametrize(
    "rows,vocab,hidden,bias,softcap,chunk_rows",
    [
        (37, LLM_VOCAB, 16, False, None, None),  # Qwen2's vocabulary, odd row count, default chunks
        (1, LLM_VOCAB, 16, True, None, None),
        (37, VOCAB, 8, True, 3.0, 5),  # soft-capping (Gemma-2), chunks that do not divide the rows
        (64, 1000, 24, False, None, 64),
    ],
)
def test_op_matches_dense_head(rows, vocab, hidden, bias, softcap, chunk_rows):
    (loss_a, grads_a), (loss_b, grads_b) = dense_and_chunked(rows, vocab, hidden, bias, softcap, chunk_rows)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=0)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7 * a.abs().max().item())


def test_op_zero_rows_gives_zero_gradients():
    h = torch.zeros(0, 8, requires_grad=True)
    weight = torch.randn(VOCAB, 8, requires_grad=True)
    loss = linear_cross_entropy(h, weight, None, torch.zeros(0, dtype=torch.long)).sum() / 0
    loss.backward()
    assert torch.isnan(loss) and h.grad.shape == (0, 8) and not weight.grad.any()


def test_unequal_row_weights_on_a_trainable_head_raise():
    h = torch.randn(4, 8, requires_grad=True)
    weight = torch.randn(VOCAB, 8, requires_grad=True)
    nll = linear_cross_entropy(h, weight, None, torch.arange(4))
    with pytest.raises(RuntimeError, match="chunked_cross_entropy='never'"):
        (nll * torch.arange(1.0, 5.0)).sum().backward()


def test_unequal_row_weights_on_a_frozen_head_are_exact():
    generator = torch.Generator().manual_seed(0)
    h = torch.randn(4, 8, generator=generator).requires_grad_()
    weight = torch.randn(VOCAB, 8, generator=generator)
    targets, weights = torch.arange(4), torch.arange(1.0, 5.0)
    (linear_cross_entropy(h, weight, None, targets) * weights).sum().backward()
    expected, h.grad = h.grad, None
    (F.cross_entropy(h @ weight.T, targets, reduction="none") * weights).sum().backward()
    # atol at 1e-6 of gradients of order 1: the two sum a row's logits in different orders
    torch.testing.assert_close(expected, h.grad, rtol=1e-5, atol=1e-6)


def assert_same(stock, chunked, rtol=1e-5):
    """Loss within `rtol`; every gradient within `rtol` of its largest entry (float summation order only)."""
    assert_same_relative_to_scale(stock, chunked, rtol)


def stock_and_chunked(model, mode="always"):
    chunked = copy.deepcopy(model)
    report = optimize(chunked, chunked_cross_entropy=mode)
    assert report.chunked_cross_entropy is not None, report.skipped
    return model, chunked


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("lengths,ignore_every,num_items", [([9, 7, 3], 3, None), ([5], 0, 11), ([4, 4], 1, None)])
def test_model_loss_and_every_gradient_match_stock(tied, lengths, ignore_every, num_items):
    stock, chunked = stock_and_chunked(llm(tied=tied))
    inputs = synthetic_batch(stock, lengths, seed=len(lengths), ignore_every=ignore_every)  # every=1: no kept row
    kwargs = {} if num_items is None else {"num_items_in_batch": torch.tensor(num_items)}
    assert_same(loss_and_grads(stock, inputs, **kwargs), loss_and_grads(chunked, inputs, **kwargs))


def soft_capped_llm(window: int = 8):
    """`llm`'s Gemma-2 (soft-capped logits) with a `window`-token sliding window. At Gemma-2's default 4,096 the
    window never binds on short batches, and padding-free's install check packs 4,098-token sequences through
    eager attention: 18 s of this test's 18 s (0.2 s at 8 tokens)."""
    model = llm(vocab=VOCAB, softcap=2.0)
    model.config.sliding_window = window
    torch.manual_seed(0)
    return type(model)(model.config)  # built again: each attention layer reads its window at construction


def test_soft_capping_and_gradient_checkpointing_match_stock():
    model = soft_capped_llm()
    assert model.config.final_logit_softcapping == 2.0 and model.config.layer_types == ["sliding_attention"]
    stock, chunked = stock_and_chunked(model)
    for model in (stock, chunked):
        model.gradient_checkpointing_enable()
    inputs = synthetic_batch(stock, [9, 6], seed=1, ignore_every=4)  # the 9-token sequence outruns the window
    assert_same(loss_and_grads(stock, inputs), loss_and_grads(chunked, inputs))


@pytest.mark.parametrize("vocab,expect_chunked", [(VOCAB, False), (LLM_VOCAB, True)])
def test_auto_chunks_only_large_kept_logits(vocab, expect_chunked):
    _, model = stock_and_chunked(llm(vocab=vocab), mode="auto")
    model.train()
    inputs = synthetic_batch(model, [128] * 1, seed=0)  # 127 kept rows x 151,936 x 4 B = 77 MB > 64 MB
    logits = model(**inputs).logits
    assert (logits.shape[-1] == 0) == expect_chunked


def test_evaluation_keeps_full_logits():
    _, model = stock_and_chunked(llm())
    model.eval()
    inputs = synthetic_batch(model, [5, 3], seed=0)
    assert model(**inputs).logits.shape == (2, 5, LLM_VOCAB)


def test_option_is_checked_and_backends_turn_it_to_never(tmp_path):
    from turbotrain import TurboOptions, TurboTrainingArguments

    with pytest.raises(ValueError, match="chunked_cross_entropy must be one of"):
        TurboTrainingArguments(output_dir=str(tmp_path), chunked_cross_entropy="sometimes")
    off = TurboOptions().without({"chunked_cross_entropy": "compiled"}, "inductor")
    assert off.chunked_cross_entropy == "never"
