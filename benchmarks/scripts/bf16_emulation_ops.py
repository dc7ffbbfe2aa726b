"""Per-op and per-head times on this CPU: fp32, stock CPU bf16 autocast, bf16 emulated in fp32 GEMMs.

Interleaved rounds, median seconds per call, ratios to fp32. Rows:
* the head matmul [rows x hidden] . [hidden x vocab] (one chunk of a Qwen2 head: 220 x 256 x 151,936);
* the chunked head's forward+backward (passes/chunked_ce/, loss and every gradient) on `--head-rows` rows,
  and the dense head (F.linear + cross-entropy) under the same autocast, stock and emulated.

    flock /tmp/turbotrain-cpu.lock env PYTHONPATH=src python benchmarks/scripts/bf16_emulation_ops.py
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
import torch.nn.functional as F

from turbotrain.passes.chunked_ce import linear_cross_entropy
from turbotrain.training.bf16_emulation import Bf16Emulation

BF16 = torch.bfloat16


def precision(mode: str):
    if mode == "fp32":
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast("cpu", BF16))
    if mode == "emulated":
        stack.enter_context(Bf16Emulation())
    return stack


def head_step(h, w, targets, chunked: bool, mode: str):
    hidden, weight = h.detach().requires_grad_(), w.detach().requires_grad_()
    with precision(mode):
        if chunked:
            loss = linear_cross_entropy(hidden, weight, None, targets).mean()
        else:
            loss = F.cross_entropy(F.linear(hidden, weight).float(), targets)
        loss.backward()


def timed(call, mode: str) -> float:
    start = time.perf_counter()
    call(mode)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=220)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--head-rows", type=int, default=440)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    x, w = torch.randn(args.rows, args.hidden), torch.randn(args.vocab, args.hidden) * 0.05
    h = torch.randn(args.head_rows, args.hidden)
    targets = torch.randint(0, args.vocab, (args.head_rows,))

    def matmul(mode):
        with precision(mode):
            F.linear(x, w)

    cases = {f"matmul {args.rows}x{args.hidden}x{args.vocab}": lambda mode: matmul(mode)}
    for chunked in (False, True):
        name = f"{'chunked' if chunked else 'dense'} head fwd+bwd, {args.head_rows} rows"
        cases[name] = lambda mode, chunked=chunked: head_step(h, w, targets, chunked, mode)
    modes = ("fp32", "stock_bf16", "emulated")
    times = {(case, mode): [] for case in cases for mode in modes}
    for call in cases.values():
        for mode in modes:
            call(mode)  # warm-up
    for _ in range(args.rounds):
        for case, call in cases.items():
            for mode in modes:
                times[case, mode].append(timed(call, mode))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.rounds} interleaved rounds")
    print("| case | fp32 s | stock bf16 autocast s | emulated s | stock/emulated |")
    print("|---|---|---|---|---|")
    for case in cases:
        fp32, stock, emulated = (statistics.median(times[case, mode]) for mode in modes)
        print(f"| {case} | {fp32:.3f} | {stock:.3f} | {emulated:.3f} | {stock / emulated:.2f}x |")


if __name__ == "__main__":
    main()
