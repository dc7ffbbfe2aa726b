"""The device check's "heads" section: the LM head and its loss, forward and backward, at the two published
shapes' vocabularies, each way a GPU user's trainer can compute it: time and peak memory.

Per shape (Qwen2.5-0.5B: hidden 896, vocabulary 151,936; Llama-3.2-1B: 2,048 and 128,256; their published configs),
4,096 kept rows (a realshape SFT batch's completion tokens), fp32 weights under bf16 autocast (Trainer's bf16=True),
the mean NLL's forward and backward (gradients of the rows and the weight):
* `stock`: Transformers' causal-LM loss on the rows: bf16 logits [K, V], upcast, cross-entropy;
* `sft op, eager softmax`: turbotrain's chunked head (passes/chunked_ce, the op SFT's calls take: dW summed in
  the forward) with its per-chunk softmax and gradient in eager torch ops (its op before 2026-12-05, late);
* `sft op, fused softmax`: the same with them fused by Inductor (chunked_ce/fused_epilogue.py; CUDA with Triton),
  and again in chunks of half as many rows (`half chunks`: half the memory, dW's fp32 sum read and written twice
  as often), the measurement the chunk size (cuda.cuda_chunk_rows) waits for;
* `per-row op, eager / fused softmax`: the op DPO, KTO, GRPO and RLOO calls take (chunked_ce/logprobs.py: any
  per-row weight, the logits recomputed in the backward), eager and fused;
* `trl kernel`: TRL's fused LM head (`trl.kernels.ChunkedLogProbFunction`, what TRL >= 1.15's trainers run on a GPU);
* `liger`: Liger's fused linear cross-entropy, where liger-kernel is installed.
Each: one warm-up (the compile), then the median of 3, CUDA synchronised; peak memory above the inputs, from the
allocator's peak. `result`: the loss within 1e-2 relative of stock's (bf16), the rows' and the weight's gradients
within 2e-2 of their scale; `turbotrain takes`: the rows the measured choices took (fused_epilogue.chosen) on this
device. `--quick` on the CPU: hidden 64, vocabulary 4,096, 256 rows, fp32 (the fused rows need CUDA with Triton).
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
OPS = {"sft op": ("softmax and gradient",), "per-row op": ("log-probabilities", "log-probability gradient")}
HALF_CHUNKS = "sft op, fused softmax, half chunks"  # the chunk size's trade: less memory, dW's sum more often
WAYS = ("stock", *(f"{op}, {how} softmax" for op in OPS for how in ("eager", "fused")), HALF_CHUNKS, "trl kernel",
        "liger")  # fmt: skip


def head_rows(device: torch.device, quick: bool) -> list[dict]:
    """The section's rows. The fused softmax's choices made here are the section's own: each shape's are made as a
    fresh process makes them (within its cap of fused kinds), and the process's are put back afterwards, so the
    sections after this one choose as a user's run would."""
    from turbotrain.passes.chunked_ce import fused_epilogue

    kept_choices = dict(fused_epilogue._chosen)
    try:
        return _head_rows(device, quick)
    finally:
        fused_epilogue._chosen.clear()
        fused_epilogue._chosen.update(kept_choices)


def _head_rows(device: torch.device, quick: bool) -> list[dict]:
    from turbotrain.passes.chunked_ce import fused_epilogue

    rows = []
    shapes = {"quick": QUICK[:2]} if quick else SHAPES
    kept = QUICK[2] if quick else ROWS
    for shape, (hidden, vocab) in shapes.items():
        fused_epilogue._chosen.clear()
        try:
            inputs = _inputs(device, hidden, vocab, kept)
            taken = _measured_choices(inputs, device)
        except Exception as error:  # one shape failing does not stop the table
            rows.append({"shape": shape, "head": "(measured choices)", "result": "ERROR",
                         "note": f"{type(error).__name__}: {str(error)[:200]}"})  # fmt: skip
            continue
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
            if "softmax" in way:
                row["turbotrain takes"] = "yes" if way in taken else ""
    return rows


def _inputs(device, hidden: int, vocab: int, rows: int):
    generator = torch.Generator(device=device).manual_seed(0)
    h = torch.randn(rows, hidden, device=device, generator=generator)
    weight = torch.randn(vocab, hidden, device=device, generator=generator) * hidden**-0.5
    targets = torch.randint(0, vocab, (rows,), device=device, generator=generator)
    return h, weight, targets


def _unavailable(way: str, device: torch.device) -> str | None:
    from turbotrain.passes.chunked_ce import fused_epilogue, head_choice

    if "fused softmax" in way and not fused_epilogue.compiles_on(device):
        return "needs CUDA with Triton (Inductor's GPU kernels)"
    if way == "trl kernel" and importlib.util.find_spec("trl") is None:
        return "trl not installed"
    if way == "trl kernel" and not head_choice._has_trl_kernel():
        return "this TRL has no fused LM head (trl.kernels, TRL >= 1.15)"
    if way == "liger":
        if importlib.util.find_spec("liger_kernel") is None:
            return "liger-kernel not installed"
        if device.type != "cuda":
            return "Triton kernels: CUDA only"
    return None


def _timed(way: str, inputs, device, repeats: int = 3):
    """(loss, (dh, dW), median ms or None, peak bytes above the inputs or None) of `way`'s forward and backward."""
    step = _step(way, device)
    h, weight, targets = inputs
    result = step(h, weight, targets)  # warm-up: the compile, the choice's timing
    times, peak = [], None
    for _ in range(repeats):
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
    return *result, statistics.median(times) if times else None, peak


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
    """A fused row runs the fused kernels and an eager row the eager chunks, whatever the measured choice says
    (the choice is its own column); the other rows as they come."""
    from turbotrain.passes.chunked_ce import fused_epilogue

    if "softmax" not in way:
        yield
        return
    fused = "fused softmax" in way
    saved = fused_epilogue.applies, fused_epilogue.chosen
    fused_epilogue.applies = lambda device: fused
    fused_epilogue.chosen = lambda *args: fused
    try:
        yield
    finally:
        fused_epilogue.applies, fused_epilogue.chosen = saved


def _measured_choices(inputs, device: torch.device) -> set[str]:
    """The rows turbotrain's own measured choices take for this head (fused_epilogue.chosen, timed on the device
    in one step of each op here): one per op."""
    from turbotrain.passes.chunked_ce import fused_epilogue

    if not fused_epilogue.compiles_on(device):
        return {f"{op}, eager softmax" for op in OPS}
    _timed("sft op", inputs, device, repeats=0)
    _timed("per-row op", inputs, device, repeats=0)
    weight = inputs[1]
    taken = set()
    for op, whats in OPS.items():
        answers = [
            fused for key, fused in fused_epilogue._chosen.items() if key[0] in whats and key[1] == weight.shape[0]
        ]
        taken.add(f"{op}, {'fused' if answers and all(answers) else 'eager'} softmax")
    return taken


def _loss(way: str, h, weight, targets, half: bool):
    from turbotrain.passes.chunked_ce import LinearCrossEntropy, chunk_rows_for, cuda, head_choice, logprobs

    if way == "stock":
        return F.cross_entropy(F.linear(h, weight).float(), targets)
    on_cuda = h.device.type == "cuda"
    rows = cuda.cuda_chunk_rows(h.shape[1]) if on_cuda else chunk_rows_for(weight.shape[0])
    rows = max(rows // 2 // 128 * 128, 128) if way == HALF_CHUNKS else rows
    if way.startswith("sft op"):
        dtype = torch.bfloat16 if half else None
        return LinearCrossEntropy.apply(h, weight, None, targets, None, rows, False, dtype)[0].mean()
    if way.startswith("per-row op"):
        return logprobs.linear_log_probs(h, weight, None, targets, chunk_rows=rows, want_stats=False)[0].mean()
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
