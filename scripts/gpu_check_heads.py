"""The device check's "heads" section: the LM head and its loss, forward and backward, at the two published
shapes' vocabularies, each way a GPU user's trainer can compute it: time and peak memory.

Per shape (Qwen2.5-0.5B: hidden 896, vocabulary 151,936; Llama-3.2-1B: 2,048 and 128,256; their published configs),
4,096 kept rows (a realshape SFT batch's completion tokens), fp32 weights under bf16 autocast (Trainer's bf16=True),
the mean NLL's forward and backward (gradients of the rows and the weight):
* `stock`: Transformers' causal-LM loss on the rows: bf16 logits [K, V], upcast, cross-entropy;
* `chunked, eager softmax`: turbotrain's chunked head (passes/chunked_ce) with its per-chunk softmax and gradient
  in eager torch ops (its op before 2026-12-05);
* `chunked, fused softmax`: the same with them fused by Inductor (chunked_ce/fused_epilogue.py; CUDA with Triton);
* `trl kernel`: TRL's fused LM head (`trl.kernels.ChunkedLogProbFunction`, what TRL >= 1.15's trainers run on a GPU);
* `liger`: Liger's fused linear cross-entropy, where liger-kernel is installed.
Each: one warm-up (the compile), then the median of 3, CUDA synchronised; peak memory above the inputs, from the
allocator's peak. `result`: the loss within 1e-2 relative of stock's (bf16), the rows' and the weight's gradients
within 2e-2 of their scale; `turbotrain takes`: the epilogue the measured choice took (fused_epilogue.fused_for) on this device.
`--quick` on the CPU: hidden 64, vocabulary 4,096, 256 rows, fp32 (the fused row needs CUDA with Triton).
"""

from __future__ import annotations

import contextlib
import importlib.util
import statistics
import time

import torch
import torch.nn.functional as F

SHAPES = {"qwen2.5-0.5b": (896, 151_936), "llama-3.2-1b": (2048, 128_256)}
ROWS, QUICK = 4096, (64, 4096, 256)
WAYS = ("stock", "chunked, eager softmax", "chunked, fused softmax", "trl kernel", "liger")


def head_rows(device: torch.device, quick: bool) -> list[dict]:
    rows = []
    shapes = {"quick": QUICK[:2]} if quick else SHAPES
    kept = QUICK[2] if quick else ROWS
    for shape, (hidden, vocab) in shapes.items():
        inputs = _inputs(device, hidden, vocab, kept)
        taken = _measured_choice(inputs, device)
        reference = None
        for way in WAYS:
            row = {"shape": shape, "head": way, "rows": f"{kept:,}"}
            rows.append(row)
            why = _unavailable(way, device)
            if why:
                row["note"] = why
                continue
            try:
                loss, grads, ms, peak = _timed(way, inputs, device)
            except Exception as error:  # one way failing does not stop the table
                row.update(result="ERROR", note=f"{type(error).__name__}: {str(error)[:200]}")
                continue
            row.update({"fwd+bwd ms": f"{ms:.2f}", "peak MiB": f"{peak / 2**20:,.0f}" if peak is not None else "n/a"})
            if way == "stock":
                reference = (loss, grads)
            else:
                row["result"] = _agreement(loss, grads, reference)
            if way.startswith("chunked"):
                row["turbotrain takes"] = "yes" if way == taken else ""
    return rows


def _inputs(device, hidden: int, vocab: int, rows: int):
    generator = torch.Generator(device=device).manual_seed(0)
    h = torch.randn(rows, hidden, device=device, generator=generator)
    weight = torch.randn(vocab, hidden, device=device, generator=generator) * hidden**-0.5
    targets = torch.randint(0, vocab, (rows,), device=device, generator=generator)
    return h, weight, targets


def _unavailable(way: str, device: torch.device) -> str | None:
    from turbotrain.passes.chunked_ce import fused_epilogue

    if way == "chunked, fused softmax" and not fused_epilogue.compiles_on(device):
        return "needs CUDA with Triton (Inductor's GPU kernels)"
    if way == "trl kernel" and importlib.util.find_spec("trl") is None:
        return "trl not installed"
    if way == "liger":
        if importlib.util.find_spec("liger_kernel") is None:
            return "liger-kernel not installed"
        if device.type != "cuda":
            return "Triton kernels: CUDA only"
    return None


def _timed(way: str, inputs, device):
    """(loss, (dh, dW), median ms, peak bytes above the inputs or None) of `way`'s forward and backward."""
    step = _step(way, device)
    h, weight, targets = inputs
    result = step(h, weight, targets)  # warm-up: the compile, the choice's timing
    times, peak = [], None
    for _ in range(3):
        _synchronize(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        start = time.perf_counter()
        result = step(h, weight, targets)
        _synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
        if device.type == "cuda":
            peak = max(peak or 0, torch.cuda.max_memory_allocated(device) - base)
    return *result, statistics.median(times), peak


def _step(way: str, device: torch.device):
    half = device.type == "cuda"

    def run(h, weight, targets):
        leaves = [h.clone().requires_grad_(), weight.clone().requires_grad_()]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=half), _fused_always(way):
            loss = _loss(way, *leaves, targets, half)
        loss.backward()
        return loss.detach().float(), (leaves[0].grad, leaves[1].grad)

    return run


@contextlib.contextmanager
def _fused_always(way: str):
    """The fused row runs the fused kernel whatever the measured choice says (the choice is its own column)."""
    from turbotrain.passes.chunked_ce import fused_epilogue

    if way != "chunked, fused softmax":
        yield
        return
    chooser = fused_epilogue.fused_for
    fused_epilogue.fused_for = lambda *args: fused_epilogue.compiled()
    try:
        yield
    finally:
        fused_epilogue.fused_for = chooser


def _measured_choice(inputs, device: torch.device) -> str:
    """The chunked row turbotrain's own choice takes for this head (fused_epilogue.fused_for: timed on the device)."""
    from turbotrain.passes.chunked_ce import _chunk, cuda, fused_epilogue

    if not fused_epilogue.compiles_on(device):
        return "chunked, eager softmax"
    h, weight, _ = inputs
    dtype = torch.bfloat16
    w = weight.to(dtype)

    def eager(rows, targets):
        return _chunk(rows, w, None, targets, None, False, dtype)

    fused = fused_epilogue.fused_for(device, w, None, cuda.cuda_chunk_rows(h.shape[1]), None, False, eager)
    return "chunked, fused softmax" if fused is not None else "chunked, eager softmax"


def _loss(way: str, h, weight, targets, half: bool):
    from turbotrain.passes.chunked_ce import LinearCrossEntropy, chunk_rows_for, cuda, head_choice

    if way == "stock":
        return F.cross_entropy(F.linear(h, weight).float(), targets)
    if way.startswith("chunked"):
        rows = cuda.cuda_chunk_rows(h.shape[1]) if h.device.type == "cuda" else chunk_rows_for(weight.shape[0])
        dtype = torch.bfloat16 if half else None
        fuse = way == "chunked, fused softmax"
        return LinearCrossEntropy.apply(h, weight, None, targets, None, rows, False, dtype, fuse)[0].mean()
    if way == "trl kernel":
        return head_choice.trl_projection(h, weight, None, targets, None, 1.0, False)[0].mean()
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

    return LigerFusedLinearCrossEntropyLoss()(weight, h, targets)


def _agreement(loss, grads, reference) -> str:
    if reference is None:
        return "n/a (no stock row)"
    stock_loss, stock_grads = reference
    loss_gap = abs(float(loss) - float(stock_loss)) / abs(float(stock_loss))
    dh, dw = (_gap(grad, stock) for grad, stock in zip(grads, stock_grads))
    fine = loss_gap <= 1e-2 and max(dh, dw) <= 2e-2
    return ("PASS" if fine else "FAIL") + f" (loss {loss_gap:.1e}, dh {dh:.1e}, dW {dw:.1e})"


def _gap(grad, stock) -> float:
    """The largest difference from stock's gradient, relative to stock's largest element."""
    return float((grad.float() - stock.float()).abs().max() / stock.float().abs().max())


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
