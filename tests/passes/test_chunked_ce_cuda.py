"""The chunked head's CUDA choices (passes/chunked_ce/cuda.py), run on the CPU: the decisions take the device as
an argument, the half-precision op runs here through the same code with an fp32 product in place of cuBLAS's
fp32-output kernel, and the shared-factor check reads nothing back for a sum's gradient."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.tiny_models import LLM_VOCAB
from turbotrain.passes import chunked_ce
from turbotrain.passes.chunked_ce import LinearCrossEntropy, linear_cross_entropy
from turbotrain.passes.chunked_ce import cuda as chunked_ce_cuda

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


@pytest.mark.parametrize("weight_dtype", [FP32, BF16])
@pytest.mark.parametrize("autocast", [None, BF16, FP16])
def test_cpu_always_keeps_the_op_as_built(weight_dtype, autocast):
    assert chunked_ce_cuda.compute_dtype_for("cpu", weight_dtype, autocast) is None


def test_cuda_follows_the_runs_autocast_then_the_weights_dtype():
    assert chunked_ce_cuda.compute_dtype_for("cuda", FP32, BF16) is BF16
    assert chunked_ce_cuda.compute_dtype_for(torch.device("cuda", 0), FP32, FP16) is FP16
    assert chunked_ce_cuda.compute_dtype_for("cuda", BF16, None) is BF16  # a model loaded in bf16
    assert chunked_ce_cuda.compute_dtype_for("cuda", FP32, None) is None  # fp32 training: fp32 matmuls, as stock


@pytest.mark.parametrize("hidden,rows", [(3584, 3584), (896, 2048), (4097, 4224), (8192, 8192)])
def test_cuda_chunks_come_from_the_hidden_size(hidden, rows):
    assert chunked_ce_cuda.cuda_chunk_rows(hidden) == rows


def test_cpu_chunks_are_unchanged():
    assert chunked_ce.chunk_rows_for(LLM_VOCAB) == chunked_ce.CHUNK_BYTES // (4 * LLM_VOCAB) == 220


def inputs(rows=37, vocab=1000, hidden=24, seed=0):
    generator = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, hidden, generator=generator)
    weight = torch.randn(vocab, hidden, generator=generator) * 0.05
    targets = torch.randint(0, vocab, (rows,), generator=generator)
    return h, weight, targets


def chunked_in(dtype, h, weight, targets, chunk_rows=8, softcap=None, bias=None):
    leaves = [t.clone().requires_grad_() for t in (h, weight)]
    nll = LinearCrossEntropy.apply(leaves[0], leaves[1], bias, targets, softcap, chunk_rows, False, dtype)[0]
    (nll.sum() / len(targets)).backward()
    return nll.detach(), leaves[0].grad, leaves[1].grad


def reference_in(dtype, h, weight, targets, softcap=None):
    """What the half path computes, in float64 from the same rounded inputs: logits of the half matmul, an fp32
    softmax, dz rounded to the half dtype, then dh in the half dtype and dW exactly."""
    hd, wd = h.to(dtype), weight.to(dtype)
    z = (hd @ wd.T).double()
    z = softcap * torch.tanh(z / softcap) if softcap else z
    nll = F.cross_entropy(z, targets, reduction="none")
    dz = torch.softmax(z, dim=1)
    dz[torch.arange(len(targets)), targets] -= 1
    if softcap:
        dz *= 1 - (z / softcap) ** 2
    dz = dz.to(dtype)
    scale = 1 / len(targets)
    return nll, (dz @ wd).double() * scale, dz.double().T @ hd.double() * scale


@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("softcap", [None, 3.0])
def test_half_path_sums_the_weight_gradient_in_fp32(dtype, softcap):
    h, weight, targets = inputs()
    nll, dh, dw = chunked_in(dtype, h, weight, targets, softcap=softcap)
    ref_nll, ref_dh, ref_dw = reference_in(dtype, h, weight, targets, softcap=softcap)
    assert dw.dtype == FP32 and dh.dtype == FP32  # the parameters' own dtypes
    torch.testing.assert_close(nll.double(), ref_nll, rtol=1e-5, atol=1e-5)
    # dW: fp32 sums of the rounded dz·h products over 5 chunks, within 2e-5 of its scale; an output rounded to
    # the half dtype would be off by ~2e-3 (a dz element on a rounding boundary moves a few entries ~2e-6)
    torch.testing.assert_close(dw.double(), ref_dw, rtol=0, atol=2e-5 * ref_dw.abs().max().item())
    torch.testing.assert_close(dh.double(), ref_dh, rtol=1e-2, atol=1e-2 * ref_dh.abs().max().item())


def test_half_path_is_close_to_the_fp32_head():
    h, weight, targets = inputs(rows=50, vocab=2000)
    half = chunked_in(BF16, h, weight, targets, chunk_rows=16)
    full = chunked_in(None, h, weight, targets, chunk_rows=16)
    for a, b in zip(half, full):
        torch.testing.assert_close(a, b, rtol=3e-2, atol=3e-2 * b.abs().max().item())


def test_half_path_with_bias_and_zero_rows():
    h, weight, targets = inputs(rows=0)
    bias = torch.zeros(weight.shape[0], requires_grad=True)
    nll, dh, dw = chunked_in(BF16, h, weight, targets, bias=bias)
    assert nll.numel() == 0 and torch.count_nonzero(dw) == 0 and bias.grad is not None


def test_a_sums_gradient_needs_no_value_check(monkeypatch):
    strides = []
    real = chunked_ce_cuda.shared_factor
    monkeypatch.setattr(chunked_ce_cuda, "shared_factor", lambda g: strides.append(g.stride()) or real(g))
    h, weight, targets = inputs()
    leaves = [t.clone().requires_grad_() for t in (h, weight)]
    (linear_cross_entropy(*leaves, None, targets).sum() / 37).backward()
    assert strides == [(0,)]  # an expanded scalar: equal by construction, nothing is read from the device


def test_unequal_weights_still_raise_on_the_cpu():
    h, weight, targets = inputs()
    leaves = [t.clone().requires_grad_() for t in (h, weight)]
    nll = linear_cross_entropy(*leaves, None, targets)
    with pytest.raises(RuntimeError, match="weighted unequally"):
        (nll * torch.linspace(0.5, 1.5, len(targets))).sum().backward()


class DoneEvent:
    def __init__(self, done=True):
        self.done = done

    def query(self):
        return self.done


def test_a_deferred_check_raises_once_its_answer_has_arrived():
    checks = chunked_ce_cuda._PendingChecks()
    checks.pending = [(torch.tensor(False), DoneEvent()), (torch.tensor(True), DoneEvent(done=False))]
    checks.raise_if_unequal()  # the unequal answer is still on its way: nothing yet
    assert len(checks.pending) == 1
    checks.pending[0][1].done = True
    with pytest.raises(RuntimeError, match="previous step"):
        checks.raise_if_unequal()
    assert checks.pending == []


def test_an_addmm_that_refuses_an_fp32_sum_adds_each_chunks_fp32_product_and_says_so(monkeypatch, caplog):
    """Older torch checks that addmm's `self` has its inputs' dtype (a RuntimeError on the host): every later chunk's
    fp32 product is added to dW, said once (CUDA's path, on CPU tensors with torch's dtype overloads faked)."""
    real_mm = torch.mm

    def mm_with_out_dtype(a, b, out_dtype=None, out=None):  # the CPU has no aten::mm.dtype: CUDA's, in fp32
        product = real_mm(a.float(), b.float())
        return product if out is None else out.copy_(product)

    def addmm_refusing(*args, **kwargs):
        raise RuntimeError("self and mat2 must have the same dtype, but got Float and BFloat16")

    monkeypatch.setattr(chunked_ce_cuda, "_ADDMM_INTO_FP32", [True])
    monkeypatch.setattr(chunked_ce_cuda, "_MM_OUT_DTYPE", [True])
    monkeypatch.setattr(torch, "mm", mm_with_out_dtype)
    monkeypatch.setattr(torch, "addmm", addmm_refusing)
    generator = torch.Generator().manual_seed(0)
    chunks = [(torch.randn(40, 16, generator=generator), torch.randn(16, 8, generator=generator)) for _ in range(3)]
    dw = torch.empty(40, 8)
    with caplog.at_level("WARNING", logger="turbotrain"):
        for index, (dz_t, h) in enumerate(chunks):
            chunked_ce_cuda._add_in_fp32(dw, dz_t.bfloat16(), h.bfloat16(), first=index == 0)
    assert chunked_ce_cuda._ADDMM_INTO_FP32 == [False]
    assert caplog.text.count("does not sum a torch.bfloat16 product into fp32 dW in place") == 1
    expected = sum(real_mm(a.bfloat16().float(), b.bfloat16().float()) for a, b in chunks)
    torch.testing.assert_close(dw, expected, rtol=1e-6, atol=1e-5)


def test_a_torch_without_out_dtype_sums_the_half_products_in_fp32(monkeypatch):
    """torch < 2.8 has no `out_dtype` (a TypeError on the host): the first chunk says so once, and every chunk's
    half product is then added to the fp32 dW (CUDA's path, run here on CPU tensors with torch.mm as 2.7's)."""
    real_mm = torch.mm

    def mm_without_out_dtype(*args, **kwargs):
        if "out_dtype" in kwargs:
            raise TypeError("mm() got an unexpected keyword argument 'out_dtype'")
        return real_mm(*args, **kwargs)

    monkeypatch.setattr(chunked_ce_cuda, "_MM_OUT_DTYPE", [True])
    monkeypatch.setattr(torch, "mm", mm_without_out_dtype)
    generator = torch.Generator().manual_seed(0)
    chunks = [(torch.randn(40, 16, generator=generator), torch.randn(16, 8, generator=generator)) for _ in range(3)]
    dw = torch.empty(40, 8)
    for index, (dz_t, h) in enumerate(chunks):
        chunked_ce_cuda._add_in_fp32(dw, dz_t.bfloat16(), h.bfloat16(), first=index == 0)
    assert chunked_ce_cuda._MM_OUT_DTYPE == [False]
    expected = sum(a.bfloat16().float() @ b.bfloat16().float() for a, b in chunks)
    torch.testing.assert_close(dw, expected, rtol=0, atol=1e-2 * expected.abs().max().item())  # bf16 products
