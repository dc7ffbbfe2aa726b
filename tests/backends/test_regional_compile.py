"""Regional compilation (inductor scope='blocks'): the repeated blocks compiled, loss and every gradient as eager."""

from __future__ import annotations

import pytest
import torch

from tests.tiny_models import make
from turbotrain.backends import get_backend
from turbotrain.modeling import repeated_blocks, synthetic_batch


def test_repeated_blocks_are_the_layer_stacks():
    assert [type(b).__name__ for b in repeated_blocks(make("gpt2"))] == ["GPT2Block"] * 2
    assert [type(b).__name__ for b in repeated_blocks(make("roberta"))] == ["RobertaLayer"] * 2
    assert repeated_blocks(torch.nn.Linear(2, 2)) == []


def test_scope_is_checked():
    with pytest.raises(ValueError, match="scope must be one of"):
        get_backend("inductor", {"scope": "everything"})


def loss_and_grads(model, batch):
    model.zero_grad()
    loss = model(**batch).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.requires_compiler
@pytest.mark.parametrize("family", ["gpt2"])  # llama passed too (26 s more of compiling; 2026-12-01)
def test_regional_compile_matches_eager_loss_and_gradients(family):
    eager, compiled = make(family, dropout=False), make(family, dropout=False)
    backend = get_backend("inductor", {"scope": "blocks"})
    backend.wrap_model(compiled)
    assert len(backend.compiled) == 2 and compiled._compiled_call_impl is None  # blocks only, the rest eager
    for seed, lengths in ((0, [37, 37, 37]), (1, [5, 37, 20])):  # odd shapes, then a new shape (recompile)
        batch = synthetic_batch(eager, lengths, seed=seed)
        loss, grads = loss_and_grads(eager, batch)
        loss_c, grads_c = loss_and_grads(compiled, batch)
        assert torch.allclose(loss_c, loss, rtol=1e-5, atol=0)
        assert grads.keys() == grads_c.keys()
        for name, grad in grads.items():
            scale = grad.abs().max().clamp_min(1e-12)
            assert (grads_c[name] - grad).abs().max() / scale <= 1e-5, name
    backend.unwrap_model(compiled)
    assert all(block._compiled_call_impl is None for block in repeated_blocks(compiled))
