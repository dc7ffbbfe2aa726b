"""Emulated bf16 matmuls equal stock CPU bf16 autocast's: outputs within one bf16 ulp on every element, input
gradients within bf16 tolerance; the mode touches nothing else; the decision and its option."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from turbotrain.training import bf16_emulation
from turbotrain.training.bf16_emulation import Bf16Emulation, Probe, decide, decision_line

BF16 = torch.bfloat16


def within_one_ulp(stock: torch.Tensor, emulated: torch.Tensor) -> bool:
    """Every element equal or adjacent bf16 values (same sign), or both at the rounding noise around zero."""
    assert stock.dtype == emulated.dtype == BF16
    bits = (stock.view(torch.int16).int() - emulated.view(torch.int16).int()).abs()
    near_zero = (stock.float().abs() + emulated.float().abs()) <= 1e-30 + 2**-14 * stock.float().abs().max()
    return bool(((bits <= 1) | near_zero).all())


def leaves(*shapes, seed=0, layout=None):
    generator = torch.Generator().manual_seed(seed)
    made = [torch.randn(*shape, generator=generator) for shape in shapes]
    return [layout(t) if layout else t for t in made]


def run(call, tensors, emulate: bool):
    inputs = [t.detach().clone().requires_grad_() for t in tensors]
    with torch.autocast("cpu", BF16):
        if emulate:
            with Bf16Emulation():
                out = call(*inputs)
        else:
            out = call(*inputs)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(out.dtype)
    out.backward(grad)
    return out, [t.grad for t in inputs]


def transposed(t):  # same values, transposed storage: a non-contiguous input
    return t.mT.contiguous().mT


def strided(t):  # every other row of a larger tensor
    big = torch.zeros(*t.shape[:-2], 2 * t.shape[-2], t.shape[-1])
    big[..., ::2, :] = t
    return big[..., ::2, :]


CASES = {
    "linear": (lambda x, w, b: F.linear(x, w, b), [(3, 37, 65), (29, 65), (29,)]),
    "linear_no_bias": (lambda x, w: F.linear(x, w), [(41, 33), (19, 33)]),
    "matmul_operator": (lambda a, b: a @ b, [(5, 31, 17), (5, 17, 23)]),
    "matmul_broadcast": (lambda a, b: torch.matmul(a, b), [(2, 3, 13, 9), (9, 11)]),
    "tensor_matmul": (lambda a, b: a.matmul(b), [(13, 9), (9, 21)]),
    "mm": (lambda a, b: torch.mm(a, b), [(33, 47), (47, 21)]),
    "tensor_mm": (lambda a, b: a.mm(b), [(7, 5), (5, 3)]),
    "bmm": (lambda a, b: torch.bmm(a, b), [(3, 19, 7), (3, 7, 15)]),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), [(21,), (17, 9), (9, 21)]),
    "tensor_addmm": (lambda c, a, b: c.addmm(a, b), [(17, 21), (17, 9), (9, 21)]),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b), [(2, 11, 13), (2, 11, 6), (2, 6, 13)]),
}


@pytest.mark.parametrize("layout", [None, transposed, strided], ids=["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("name", list(CASES))
def test_emulated_op_equals_stock_autocast(name, layout):
    call, shapes = CASES[name]
    tensors = leaves(*shapes, layout=lambda t: layout(t) if layout and t.dim() >= 2 else t)
    stock_out, stock_grads = run(call, tensors, emulate=False)
    calls = []
    original = bf16_emulation.EmulatedMatmul.apply
    bf16_emulation.EmulatedMatmul.apply = lambda *a: calls.append(1) or original(*a)
    try:
        out, grads = run(call, tensors, emulate=True)
    finally:
        bf16_emulation.EmulatedMatmul.apply = original
    assert calls == [1]  # the emulation ran, not stock
    assert out.shape == stock_out.shape and within_one_ulp(stock_out, out)
    for stock_grad, grad in zip(stock_grads, grads):
        assert grad.dtype == stock_grad.dtype == torch.float32
        scale = stock_grad.abs().max().item()
        torch.testing.assert_close(grad, stock_grad, rtol=2**-7, atol=2**-7 * scale)


def test_large_head_matmul_within_one_ulp():
    x, w = leaves((220, 256), (4096, 256))
    with torch.autocast("cpu", BF16):
        stock = F.linear(x, w)
        with Bf16Emulation():
            emulated = F.linear(x, w)
    assert within_one_ulp(stock, emulated)


@pytest.mark.parametrize(
    "context",
    [
        lambda: torch.autocast("cpu", enabled=False),
        lambda: torch.autocast("cpu", torch.float16),
    ],
    ids=["no_autocast", "fp16_autocast"],
)
def test_mode_changes_nothing_outside_cpu_bf16_autocast(context):
    x, w = leaves((9, 7), (5, 7))
    with context():
        expected = F.linear(x, w)
        with Bf16Emulation():
            got = F.linear(x, w)
    assert got.dtype == expected.dtype and torch.equal(got, expected)


def test_fp64_and_vector_operands_are_left_to_autocast():
    a, v = torch.randn(4, 3, dtype=torch.float64), torch.randn(3)
    with torch.autocast("cpu", BF16), Bf16Emulation():
        assert (a @ a.T).dtype == torch.float64
        assert torch.matmul(torch.randn(4, 3), v).dtype == BF16  # a vector: autocast's own op


def test_parameter_cast_once_per_entry_and_cleared_on_exit():
    w = torch.nn.Parameter(torch.randn(6, 4))
    with torch.autocast("cpu", BF16), Bf16Emulation():
        F.linear(torch.randn(2, 4), w)
        F.linear(torch.randn(3, 4), w)
        assert len(bf16_emulation._CACHE) == 1
    assert not bf16_emulation._CACHE and not bf16_emulation._FP32_OF


def test_a_parameters_transpose_is_answered_from_the_parameters_one_cache_entry():
    """The chunked head's `h @ weight.T` under no_grad, per chunk: the weight is rounded once, not per chunk. Under
    no_grad each `w.T` is a fresh leaf that requires grad; cached as its own leaf, every chunk kept a whole rounded
    head alive until the mode exited (+233 MB per chunk at vocabulary 151,936)."""
    w = torch.nn.Parameter(torch.randn(6, 4))
    x = torch.randn(3, 4)
    with torch.autocast("cpu", BF16), Bf16Emulation():
        with torch.no_grad():
            first = x @ w.T
            assert list(bf16_emulation._CACHE) == [id(w)]  # the parameter, not its transpose
            low = bf16_emulation._CACHE[id(w)][2]
            for _ in range(3):
                assert torch.equal(x @ w.T, first)
            assert list(bf16_emulation._CACHE) == [id(w)] and bf16_emulation._CACHE[id(w)][2] is low
            assert bf16_emulation._round(w.T.contiguous())[0].data_ptr() != low.data_ptr()  # another place
            w.mul_(2)
            emulated = x @ w.T  # updated since: cast again
            assert bf16_emulation._CACHE[id(w)][2] is not low
        graph = x @ w.T  # where grad is on, the transpose carries the graph back to the parameter
        graph.float().sum().backward()
    assert w.grad is not None and torch.equal(w.grad, (torch.ones(3, 6).T @ x.to(BF16).float()).to(BF16).float())
    with torch.autocast("cpu", BF16):
        stock = x @ w.T
    assert within_one_ulp(stock, emulated)


def _scratch_pointers() -> set[int]:
    return {b.data_ptr() for buffers in bf16_emulation._SCRATCH.values() for b in buffers}


def test_no_grad_operands_rounded_in_reused_buffers_bitwise_as_fresh_ones():
    """The chunked head's per-chunk matmuls (under no_grad, a fresh [rows x vocab] operand each): rounded into
    buffers kept from the last chunk, the same bits as fresh copies, outputs never aliased, no buffer used twice in
    one call, buffers shared across calls by shape, dropped when the backward starts and at exit."""
    w = torch.nn.Parameter(torch.randn(64, 16))
    chunks = [torch.randn(5, 64) for _ in range(3)]
    with torch.autocast("cpu", BF16), Bf16Emulation():
        fresh = [(dz @ w).detach() for dz in (c.requires_grad_() for c in [t.clone() for t in chunks])]
        with torch.no_grad():
            logits, outs = [], []
            for dz in chunks:  # per chunk as the head does: [5, 16] @ [16, 64] (fp32 product [5, 64]), then [5, 64] @ w
                logits.append(dz[:, :16].contiguous() @ w.T)
                kept = _scratch_pointers()
                outs.append(dz @ w)  # its fp32 rounding of dz reuses the [5, 64] product buffer of the line above
                assert kept <= _scratch_pointers()
            assert len(bf16_emulation._SCRATCH[(torch.float32, (64,))]) == 1  # one [5, 64] fp32 buffer for both
            chunks[0][:4] @ w  # another row count, same row shape: the [5, 64] buffers replaced
            assert [b.shape for b in bf16_emulation._SCRATCH[(torch.float32, (64,))]] == [(4, 64)]
        for out, again in zip(outs, fresh):
            assert out.dtype == BF16 and torch.equal(out, again)  # bit for bit; earlier outputs untouched
        with torch.autocast("cpu", enabled=False):
            expected = [(h.to(BF16).float() @ w.to(BF16).float().T).to(BF16) for h in (c[:, :16] for c in chunks)]
        assert all(torch.equal(got, want) for got, want in zip(logits, expected))
        F.linear(torch.randn(2, 16), w).float().sum().backward()
        assert not bf16_emulation._SCRATCH
        with torch.no_grad():
            chunks[0] @ w
    assert not bf16_emulation._SCRATCH


def test_one_call_never_gets_the_same_buffer_twice():
    with torch.autocast("cpu", BF16), Bf16Emulation(), torch.no_grad():
        a, b = torch.randn(8, 8), torch.randn(8, 8)
        got = a @ b  # both operands and the product: [8, 8] each, five buffers at once
        assert len(bf16_emulation._SCRATCH[(torch.float32, (8,))]) == 3
        assert len(bf16_emulation._SCRATCH[(BF16, (8,))]) == 2
    with torch.autocast("cpu", enabled=False):
        assert torch.equal(got, (a.to(BF16).float() @ b.to(BF16).float()).to(BF16))


def test_cached_parameter_recast_after_an_in_place_update():
    w = torch.nn.Parameter(torch.randn(6, 4))
    x = torch.randn(2, 4)
    with torch.autocast("cpu", BF16), Bf16Emulation():
        before = F.linear(x, w)
        with torch.no_grad():
            w.mul_(2)
        after = F.linear(x, w)
    torch.testing.assert_close(after.float(), 2 * before.float(), rtol=2**-7, atol=0)


# --- gradient checkpointing: the backward runs under the mode -------------------------------------


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up, self.down = torch.nn.Linear(24, 40), torch.nn.Linear(40, 24)

    def forward(self, x):
        return self.down(F.silu(self.up(x))) + x


def block_step(checkpointing: dict | None, call_backward=lambda loss: loss.backward()):
    """(output, every gradient) of an emulated step through `Block`, checkpointed with `checkpointing`'s kwargs."""
    block = Block()
    x = torch.randn(3, 11, 24, generator=torch.Generator().manual_seed(1), requires_grad=True)
    with Bf16Emulation():
        with torch.autocast("cpu", BF16):
            out = checkpoint(block, x, **checkpointing) if checkpointing is not None else block(x)
        call_backward(out.float().square().mean())
    return out, [x.grad, *(p.grad for p in block.parameters())]


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_checkpoint_recomputation_is_emulated_as_its_forward(reentrant):
    """The recomputation in the backward runs under the mode (torch runs a mode's handler with the mode popped:
    a backward started from it would recompute in stock autocast), so the step equals the plain emulated one."""
    plain_out, plain_grads = block_step(None)
    out, grads = block_step({"use_reentrant": reentrant})
    assert torch.equal(out, plain_out)
    for grad, plain in zip(grads, plain_grads, strict=True):
        assert torch.equal(grad, plain)


BACKWARD_CALLS = {
    "tensor_backward_gradient": lambda loss: loss.backward(torch.ones_like(loss)),
    "autograd_backward_list": lambda loss: torch.autograd.backward([loss], [None]),
    "autograd_backward_retain": lambda loss: torch.autograd.backward(loss, retain_graph=True),
}


@pytest.mark.parametrize("call", BACKWARD_CALLS.values(), ids=BACKWARD_CALLS.keys())
def test_every_backward_form_recomputes_under_the_mode(call):
    _, plain_grads = block_step(None)
    _, grads = block_step({"use_reentrant": False}, call)
    for grad, plain in zip(grads, plain_grads, strict=True):
        assert torch.equal(grad, plain)


def test_backward_inputs_only_reach_the_inputs_given():
    block = Block()
    x = torch.randn(2, 24, requires_grad=True)
    with Bf16Emulation(), torch.autocast("cpu", BF16):
        block(x).float().sum().backward(inputs=[block.up.weight])
    assert block.up.weight.grad is not None and x.grad is None and block.down.weight.grad is None


def test_backward_forms_left_to_torch():
    loss = torch.ones(1, requires_grad=True).sum()
    assert bf16_emulation.backward_arguments(torch.Tensor.backward, (loss,), {"inputs": {}}) is None
    called = bf16_emulation.backward_arguments(torch.autograd.backward, (loss,), {"create_graph": True})
    assert called == ((loss,), (None,), True, True, ())


# --- the decision ---------------------------------------------------------------------------------


def fake_probe(emulated: float):
    return lambda: Probe(fp32=0.1, autocast_bf16=1.0, emulated=emulated, shape=(128, 256, 2048))


def test_auto_is_off_where_the_cpu_has_bf16_units():
    def never():
        raise AssertionError("no probe where bf16 units exist")

    assert decide("auto", flags=frozenset({"amx_bf16"}), measure=never) == (False, None)
    assert decide("auto", flags=frozenset({"avx512_bf16"}), measure=never) == (False, None)


def test_auto_without_units_follows_the_probe():
    assert decide("auto", flags=frozenset({"avx2"}), measure=fake_probe(0.2))[0] is True
    assert decide("auto", flags=frozenset({"avx2"}), measure=fake_probe(2.0))[0] is False


def test_on_and_off_are_forced():
    assert decide("on", flags=frozenset({"amx_bf16"})) == (True, None)
    assert decide("off", flags=frozenset({"avx2"})) == (False, None)
    with pytest.raises(ValueError, match="bf16_emulation must be one of"):
        decide("yes")


def test_decision_line_names_stock_turbotrain_and_speeds():
    line = decision_line(True, fake_probe(0.2)())
    assert "stock bf16 autocast would run its matmuls in torch's slow bf16 fallback" in line
    assert "fp32 GEMMs on bf16-rounded inputs" in line
    assert "128x256x2048 matmul: fp32 1 GFLOP/s, stock bf16 autocast 0, emulated 1" in line
