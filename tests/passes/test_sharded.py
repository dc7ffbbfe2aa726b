"""passes/sharded.py and what an engine's hooks need from the chunked head, in one process (the engines
themselves run under torchrun: tests/scale/test_sharded.py)."""

from __future__ import annotations

import torch

from tests.tiny_models import batch, make
from turbotrain import optimize
from turbotrain.passes import sharded


def test_whole_parameters_are_no_engine_and_need_no_gather():
    model = make("llama")
    assert sharded.engine_of(model) is None
    with sharded.whole_parameters(model):
        pass
    model.lm_head.weight.ds_id = 7  # how DeepSpeed marks a ZeRO-3 partition
    assert sharded.engine_of(model) == sharded.ZERO3


class EngineHook(torch.autograd.Function):
    """What DeepSpeed ZeRO-3 puts on a module's output: a pass-through whose backward gathers the module's
    parameters again before autograd reaches the module's own backward (here: records that it ran)."""

    calls: list[str] = []

    @staticmethod
    def forward(ctx, output):
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad):
        EngineHook.calls.append("pre-backward")
        return grad


def test_the_loss_backward_passes_through_the_head_modules_output():
    model = make("llama", dropout=False)
    optimize(model, chunked_cross_entropy="always", padding_free=False, embedding_grad=False)
    model.lm_head.register_forward_hook(lambda module, args, output: EngineHook.apply(output))
    EngineHook.calls.clear()
    model.train()
    loss = model(**batch(2, 9, keep=0.5)).loss
    assert model.lm_head._turbotrain_chunked_ce is not None and EngineHook.calls == []
    loss.backward()
    assert EngineHook.calls == ["pre-backward"]  # the engine would have gathered lm_head.weight for its gradient
    assert model.lm_head.weight.grad is not None and torch.isfinite(model.lm_head.weight.grad).all()
