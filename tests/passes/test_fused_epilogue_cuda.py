"""The chunked head's fused softmax and gradient on a CUDA GPU (passes/chunked_ce/fused_epilogue.py): Triton's
kernel against the eager chunk inside the op, under bf16 autocast, at Qwen2.5-0.5B's head (hidden 896, vocabulary
151,936), and the memory it was built to save. The timing is told the fused chunk won, so the kernel runs
whatever this GPU measures (the gpu check reports the measured times)."""

from __future__ import annotations

import pytest
import torch

from turbotrain.passes import device_timing
from turbotrain.passes.chunked_ce import fused_epilogue, linear_cross_entropy

ON_CUDA = torch.cuda.is_available()  # hardware, not an optional dependency: no requires_ marker
pytestmark = pytest.mark.skipif(not ON_CUDA, reason="needs a CUDA GPU")
HIDDEN, VOCAB, ROWS = 896, 151_936, 3000  # two chunks of 2,048 rows: one full, one shorter


@pytest.fixture
def fused_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path))
    monkeypatch.setattr(fused_epilogue, "_chosen", {})

    def fused_faster(stock_step, fused_step, device):
        stock_step(), fused_step()  # both run (the compile included), then the fused one is said faster
        return 2.0, 1.0

    monkeypatch.setattr(device_timing, "_medians_ms", fused_faster)


def head_step(fuse: bool, softcap=None, want_stats=False):
    generator = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(ROWS, HIDDEN, device="cuda", generator=generator, requires_grad=True)
    weight = (torch.randn(VOCAB, HIDDEN, device="cuda", generator=generator) * 0.05).requires_grad_()
    targets = torch.randint(0, VOCAB, (ROWS,), device="cuda", generator=generator)
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        if fuse:
            outputs = linear_cross_entropy(h, weight, None, targets, softcap=softcap, want_stats=want_stats)
        else:
            from turbotrain.passes.chunked_ce import LinearCrossEntropy, cuda

            rows = cuda.cuda_chunk_rows(HIDDEN)
            args = (h, weight, None, targets, softcap, rows, want_stats, torch.bfloat16, False)
            outputs = LinearCrossEntropy.apply(*args)
            outputs = outputs if want_stats else outputs[0]
    nll = outputs[0] if want_stats else outputs
    peak = torch.cuda.max_memory_allocated() - before
    (nll.sum() / ROWS).backward()
    return [nll.detach(), h.grad, weight.grad], peak


@pytest.mark.parametrize("softcap,want_stats", [(None, False), (None, True), (30.0, False)])
def test_tritons_chunk_is_the_eager_chunk(fused_wins, softcap, want_stats):
    fused, _ = head_step(True, softcap, want_stats)
    assert fused_epilogue._chosen and all(fused_epilogue._chosen.values())
    eager, _ = head_step(False, softcap, want_stats)
    for a, b in zip(fused, eager):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2 * b.abs().max().item())


def test_the_fused_chunk_holds_no_fp32_logits(fused_wins):
    head_step(True, want_stats=True)  # compiled and timed first: the peaks below are one step's
    _, fused_peak = head_step(True, want_stats=True)
    _, eager_peak = head_step(False, want_stats=True)
    fp32_chunk = 2048 * VOCAB * 4
    assert eager_peak - fused_peak > fp32_chunk  # at least one fp32 [C, V] fewer


@pytest.mark.parametrize("trained", [True, False])  # DPO's full fine-tune (recomputed backward), LoRA's frozen head
def test_the_per_row_ops_fused_chunks_are_its_eager_ones(fused_wins, monkeypatch, trained):
    from turbotrain.passes.chunked_ce.logprobs import linear_log_probs

    def run():
        generator = torch.Generator(device="cuda").manual_seed(0)
        h = torch.randn(ROWS, HIDDEN, device="cuda", generator=generator, requires_grad=True)
        weight = (torch.randn(VOCAB, HIDDEN, device="cuda", generator=generator) * 0.05).requires_grad_(trained)
        targets = torch.randint(0, VOCAB, (ROWS,), device="cuda", generator=generator)
        row_weights = torch.randn(ROWS, device="cuda", generator=generator)  # DPO's per-sequence factors, signed
        with torch.autocast("cuda", dtype=torch.bfloat16):
            nll, entropy, is_top1, mean = linear_log_probs(h, weight, None, targets, temperature=0.7)
        (nll * row_weights).sum().backward()
        return [nll.detach(), entropy, mean, h.grad, *([weight.grad] if trained else [])]

    fused = run()
    assert fused_epilogue._chosen and all(fused_epilogue._chosen.values())
    monkeypatch.setattr(fused_epilogue, "applies", lambda device: False)
    for a, b in zip(fused, run()):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2 * b.abs().max().item())
