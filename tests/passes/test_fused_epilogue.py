"""The chunked head's fused softmax and gradient (passes/chunked_ce/fused_epilogue.py), run on the CPU: the function
against the eager chunk it replaces, compiled by the CPU's Inductor, inside the op (fp32 and half paths, against
the op without it), and the measured choice (faster: fused; slower or failing: the eager chunk, said once;
never on the CPU or inside a compiled region)."""

from __future__ import annotations

import logging

import pytest
import torch

from tests.passes.test_chunked_ce_cuda import chunked_in, inputs
from tests.tiny_models import LLM_VOCAB
from turbotrain.passes import chunked_ce, device_timing
from turbotrain.passes.chunked_ce import LinearCrossEntropy, fused_epilogue, linear_cross_entropy
from turbotrain.utils.warnings import TurbotrainWarning

BF16, FP32 = torch.bfloat16, torch.float32
TOLERANCE = {FP32: dict(rtol=1e-5, atol=1e-5), BF16: dict(rtol=0, atol=2**-8)}  # dz: one bf16 rounding apart


def chunk_inputs(rows=37, vocab=1001, hidden=24, dtype=FP32, bias=False, seed=0):
    h, weight, target = inputs(rows, vocab, hidden, seed)
    b = torch.randn(vocab, generator=torch.Generator().manual_seed(seed)) if bias else None
    return h.to(dtype), (weight * 40).to(dtype), b, target  # logits of a few units, as a trained head's


def assert_chunks_agree(got, expected, dtype):
    names = ("nll", "dz", "entropy", "is_top1")
    for name, a, b in zip(names, got, expected):
        assert (a is None) == (b is None), name
        if a is None:
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if name == "is_top1":
            assert torch.equal(a, b)
        elif name == "dz":
            torch.testing.assert_close(a, b, **TOLERANCE[dtype])
        else:  # fp32 reductions of the same values, in another order
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("want_stats", [False, True])
@pytest.mark.parametrize("softcap", [None, 3.0])
@pytest.mark.parametrize("bias", [False, True])
def test_the_function_is_the_eager_chunk(monkeypatch, dtype, want_stats, softcap, bias):
    monkeypatch.setattr(fused_epilogue, "compiled", lambda function: function)  # Inductor's: the test below
    h, weight, b, target = chunk_inputs(dtype=dtype, bias=bias)
    expected = chunked_ce._chunk(h, weight, b, target, softcap, want_stats, dtype)
    got = fused_epilogue.softmax_gradient(h @ weight.T, b, target, softcap, want_stats)
    assert_chunks_agree(got, expected, dtype)


@pytest.mark.parametrize("dtype,want_stats,softcap,bias", [(BF16, True, None, True), (FP32, False, 30.0, False)])
def test_inductors_kernel_is_the_eager_chunk_at_any_row_count(dtype, want_stats, softcap, bias):
    h, weight, b, target = chunk_inputs(rows=67, dtype=dtype, bias=bias)
    fused = fused_epilogue.softmax_gradient  # its two parts compiled
    for rows in (67, 29):  # a full chunk and a batch's last, shorter one: one graph (dynamic rows)
        expected = chunked_ce._chunk(h[:rows], weight, b, target[:rows], softcap, want_stats, dtype)
        logits = h[:rows] @ weight.T
        got = fused(logits, b, target[:rows], softcap, want_stats)
        assert_chunks_agree(got, expected, dtype)
        assert got[1].data_ptr() == logits.data_ptr()  # dz in place of the logits: one [C, V] a chunk


@pytest.mark.parametrize("dtype", [None, BF16])  # the fp32 op as built; the half path CUDA takes
@pytest.mark.parametrize("softcap", [None, 3.0])
def test_the_op_with_the_fused_chunk_is_the_op_without(fused_on_cpu, dtype, softcap):
    asked = fused_on_cpu(stock_ms=2.0, fused_ms=1.0)
    h, weight, targets = inputs(rows=45, vocab=1500)
    weight = weight * 40
    fused = chunked_in(dtype, h, weight, targets, chunk_rows=16, softcap=softcap)
    assert len(asked) == 1  # timed once for this kind of call, then every chunk fused
    eager = _op_without_fusing(dtype, h, weight, targets, softcap)
    for a, b in zip(fused, eager):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * b.abs().max().item())


def _op_without_fusing(dtype, h, weight, targets, softcap):
    leaves = [t.clone().requires_grad_() for t in (h, weight)]
    args = (leaves[0], leaves[1], None, targets, softcap, 16, False, dtype, False)
    nll = LinearCrossEntropy.apply(*args)[0]
    (nll.sum() / len(targets)).backward()
    return nll.detach(), leaves[0].grad, leaves[1].grad


def _choice(stats=False):
    h, weight, b, target = chunk_inputs(bias=True)

    def eager(rows, targets):
        return chunked_ce._chunk(rows, weight, b, targets, None, stats, FP32)

    return fused_epilogue.fused_for(torch.device("cpu"), weight, b, 16, None, stats, eager)


def test_fused_where_it_measured_faster_and_said_once(fused_on_cpu, caplog, tmp_path):
    fused_on_cpu(stock_ms=2.0, fused_ms=0.5)
    with caplog.at_level(logging.INFO, logger="turbotrain"):
        assert _choice() is fused_epilogue.softmax_gradient
        assert _choice() is fused_epilogue.softmax_gradient
    said = [r.getMessage() for r in caplog.records if "softmax and gradient" in r.getMessage()]
    assert len(said) == 1 and "fused by Inductor (fused 0.500 ms, eager 2.000 ms per 4 rows)" in said[0]
    assert (tmp_path / device_timing.CACHE_FILE).exists()


def test_left_eager_where_it_measured_slower(fused_on_cpu):
    fused_on_cpu(stock_ms=1.0, fused_ms=3.0)
    assert _choice() is None


def test_each_kind_of_call_is_timed_once(fused_on_cpu):
    asked = fused_on_cpu(stock_ms=2.0, fused_ms=1.0)
    _choice(stats=False), _choice(stats=True), _choice(stats=True)
    assert len(asked) == 2


def test_a_failing_compile_leaves_the_eager_chunk_with_one_warning(fused_on_cpu, monkeypatch):
    fused_on_cpu(stock_ms=2.0, fused_ms=1.0)

    def broken(*args):
        raise RuntimeError("triton: no kernel image for this GPU")

    monkeypatch.setattr(fused_epilogue, "compiled", lambda function: broken)
    with pytest.warns(TurbotrainWarning, match="keeps its eager softmax and gradient: fusing it failed.*no kernel"):
        assert _choice() is None


def test_never_on_the_cpu_nor_inside_a_compiled_region(monkeypatch):
    monkeypatch.setattr(fused_epilogue, "_chosen", {})
    assert _choice() is None  # the CPU is not timed
    monkeypatch.setattr(device_timing, "timed_on", lambda device: True)
    assert _choice() is None  # no Triton for the CPU
    monkeypatch.setattr(fused_epilogue, "compiles_on", lambda device: True)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert _choice() is None  # Inductor fuses the whole head there already
    assert fused_epilogue._chosen == {}


def test_cuda_without_triton_is_not_fused(monkeypatch):
    from turbotrain.boundaries import torch_boundary

    monkeypatch.setattr(torch_boundary, "has_triton", lambda: False)
    assert not fused_epilogue.compiles_on(torch.device("cuda"))
    assert not fused_epilogue.compiles_on(torch.device("cpu"))


def test_kinds_past_the_cap_stay_eager_without_a_timing(fused_on_cpu):
    """Dynamo runs a function uncompiled past its recompile limit: the fused kinds stop before it."""
    asked = fused_on_cpu(stock_ms=2.0, fused_ms=1.0)
    h, weight, b, target = chunk_inputs()
    answers = []
    for rows in range(16, 16 + fused_epilogue.MAX_FUSED_KINDS + 2):  # each chunk size a kind of its own

        def eager(x, t):
            return chunked_ce._chunk(x, weight, b, t, None, False, FP32)

        answers.append(fused_epilogue.fused_for(torch.device("cpu"), weight, b, rows, None, False, eager))
    assert answers.count(None) == 2 and len(asked) == fused_epilogue.MAX_FUSED_KINDS


def test_a_compile_failing_after_a_cached_timing_is_caught_before_any_step(fused_on_cpu, monkeypatch):
    fused_on_cpu(stock_ms=2.0, fused_ms=1.0)
    assert _choice() is fused_epilogue.softmax_gradient  # timed, and cached on disk
    monkeypatch.setattr(fused_epilogue, "_chosen", {})  # a new process on the same machine

    def broken(*args):
        raise RuntimeError("triton: out of shared memory")

    monkeypatch.setattr(fused_epilogue, "compiled", lambda function: broken)
    with pytest.warns(TurbotrainWarning, match="out of shared memory"):
        assert _choice() is None


def test_a_one_row_chunk_runs_eager(fused_on_cpu, monkeypatch):
    """Dynamo specialises a one-row input: a graph of its own, mid-run; that chunk takes the eager path."""
    fused_on_cpu(stock_ms=2.0, fused_ms=1.0)
    rows_seen = []

    def recording(function):
        def run(logits, *args):
            rows_seen.append(len(logits))
            return function(logits, *args)

        return run

    monkeypatch.setattr(fused_epilogue, "compiled", recording)
    h, weight, targets = inputs(rows=33, vocab=500)
    fused = chunked_in(BF16, h, weight, targets, chunk_rows=16)  # chunks of 16, 16 and 1
    assert rows_seen and 1 not in rows_seen and 16 in rows_seen
    for a, b in zip(fused, _op_without_fusing(BF16, h, weight, targets, None)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * b.abs().max().item())


def test_qwen2s_vocabulary_over_more_rows_than_a_chunk(fused_on_cpu):
    """Qwen2's published vocabulary (151,936): the CPU's own chunk size (220 rows there) over 300 rows, two chunks
    of which the second is shorter; with TRL's statistics, against the op without the fused chunks."""
    asked = fused_on_cpu(stock_ms=2.0, fused_ms=1.0)
    h, weight, targets = inputs(rows=300, vocab=LLM_VOCAB, hidden=16)
    leaves = [t.clone().requires_grad_() for t in (h, weight * 40)]
    outputs = linear_cross_entropy(*leaves, None, targets, want_stats=True)
    assert len(asked) == 1
    (outputs[0].sum() / 300).backward()
    fused = [*outputs, *(leaf.grad for leaf in leaves)]
    eager_leaves = [t.clone().requires_grad_() for t in (h, weight * 40)]
    eager = LinearCrossEntropy.apply(*eager_leaves, None, targets, None, chunked_ce.chunk_rows_for(LLM_VOCAB), True,
                                     None, False)  # fmt: skip
    (eager[0].sum() / 300).backward()
    for a, b in zip(fused, [*eager, *(leaf.grad for leaf in eager_leaves)]):
        if a.dtype == torch.bool:
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-5 * b.abs().max().item())
