"""Microbenchmark of one LoRA projection (and of q/k/v, gate/up groups) forward + backward, four ways.

    OMP_NUM_THREADS=2 python benchmarks/scripts/fused_lora_op.py --tokens 1024 --rounds 7
    OMP_NUM_THREADS=1 python benchmarks/scripts/fused_lora_op.py --tokens 1024 --clock cpu   # on a loaded machine

Shapes: Llama-3.2-1B (hidden 2048, 32 heads / 8 key-value heads of 64: q and o 2048 -> 2048, k and v
2048 -> 512; MLP 8192), LoRA r=16, alpha 32, fp32, x [tokens, 2048] requiring grad (a middle layer), W
frozen. Per row, the median seconds of one forward + backward over `--rounds` rounds, the variants
interleaved within each round in a rotating order, after one untimed round (so drifting load hits them
alike; the minimum is printed too):
* `stock`: `peft.tuners.lora.Linear` with lora_dropout=0 (base GEMM, A GEMM, B GEMM, * s, +);
* `fused`: turbotrain's pass (passes/fused_lora.py: addmm, scaling as the GEMM's alpha, custom backward);
* `stacked`: base and A projections in one GEMM over [W; A] stored once (W and A views of one storage),
  outputs returned as strided views, backward one GEMM over the concatenated [g, s·g B];
* `cat`: as `stacked`, but the stacked weight is built by `torch.cat` every step (W and A kept apart);
groups (`qkv`, `gate_up`) compare `fused` per projection with one GEMM over [Wq; Wk; Wv; Aq; Ak; Av].
Every variant's output is checked against stock's before timing.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from turbotrain.passes.fused_lora import fused_lora_linear

HIDDEN, INTERMEDIATE, KV = 2048, 8192, 512
SINGLE = {
    "q_proj": (HIDDEN, HIDDEN),
    "k_proj": (HIDDEN, KV),
    "gate_proj": (HIDDEN, INTERMEDIATE),
    "down_proj": (INTERMEDIATE, HIDDEN),
}
GROUPS = {"qkv": [HIDDEN, KV, KV], "gate_up": [INTERMEDIATE, INTERMEDIATE]}


class _Stacked(torch.autograd.Function):
    """k projections of one x: y = x S^T over S = [W_1; ...; W_k; A_1; ...; A_k], out_i = y_i + s · h_i B_i^T."""

    @staticmethod
    def forward(ctx, x, stacked, outs, ranks, scaling, *lora_bs):
        y = x @ stacked.t()  # [N, sum(outs) + sum(ranks)]
        edges = [0]
        for width in (*outs, *ranks):
            edges.append(edges[-1] + width)
        k = len(outs)
        hidden = [y[:, edges[k + i] : edges[k + i + 1]] for i in range(k)]
        results = []
        for i, lora_b in enumerate(lora_bs):
            view = y[:, edges[i] : edges[i + 1]]
            view.addmm_(hidden[i], lora_b.t(), alpha=scaling)
            results.append(view)
        ctx.save_for_backward(x, stacked, y, *lora_bs)
        ctx.edges, ctx.k, ctx.scaling = edges, k, scaling
        return tuple(results)

    @staticmethod
    def backward(ctx, *grads):
        x, stacked, y, *lora_bs = ctx.saved_tensors
        edges, k, s = ctx.edges, ctx.k, ctx.scaling
        hidden = [y[:, edges[k + i] : edges[k + i + 1]] for i in range(k)]
        grad_hidden = [(g @ b).mul_(s) for g, b in zip(grads, lora_bs)]
        grad_bs = [(g.t() @ h).mul_(s) for g, h in zip(grads, hidden)]
        grad_y = torch.cat([*grads, *grad_hidden], dim=1)  # [N, sum(outs) + sum(ranks)]
        grad_x = grad_y @ stacked
        grad_as = torch.cat([gh.t() @ x for gh in grad_hidden])  # [sum(ranks), in]
        grad_stacked = torch.zeros_like(stacked)  # only the A rows: what a real pass would hand to A's .grad
        grad_stacked[edges[k] :] = grad_as
        return (grad_x, grad_stacked, None, None, None, *grad_bs)


def peft_linear(fan_in: int, fan_out: int, r: int, generator: torch.Generator):
    from peft import LoraConfig
    from peft.tuners.lora import Linear

    base = nn.Linear(fan_in, fan_out, bias=False)
    nn.init.normal_(base.weight, std=fan_in**-0.5, generator=generator)
    base.weight.requires_grad_(False)
    layer = Linear(base, "default", config=LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0), r=r, lora_alpha=2 * r)
    nn.init.normal_(layer.lora_B["default"].weight, std=0.02, generator=generator)
    return layer


def parts(layer):
    return (
        layer.base_layer.weight,
        layer.lora_A["default"].weight,
        layer.lora_B["default"].weight,
        layer.scaling["default"],
    )


def variants_single(layer):
    weight, lora_a, lora_b, s = parts(layer)
    stacked = torch.cat([weight, lora_a]).requires_grad_()  # stored once: the storage W and A would share
    outs, ranks = (weight.shape[0],), (lora_a.shape[0],)
    return {
        "stock": lambda x: (layer(x),),
        "fused": lambda x: (fused_lora_linear(x, weight, None, lora_a, lora_b, s),),
        "stacked": lambda x: _Stacked.apply(x, stacked, outs, ranks, s, lora_b),
        "cat": lambda x: _Stacked.apply(x, torch.cat([weight, lora_a]), outs, ranks, s, lora_b),
    }


def variants_group(layers):
    weights, lora_as, lora_bs, scales = zip(*(parts(layer) for layer in layers))
    s = scales[0]
    stacked = torch.cat([*weights, *lora_as]).requires_grad_()
    outs, ranks = tuple(w.shape[0] for w in weights), tuple(a.shape[0] for a in lora_as)
    return {
        "stock": lambda x: tuple(layer(x) for layer in layers),
        "fused": lambda x: tuple(fused_lora_linear(x, w, None, a, b, s) for w, a, b in zip(weights, lora_as, lora_bs)),
        "stacked": lambda x: _Stacked.apply(x, stacked, outs, ranks, s, *lora_bs),
    }


def step(run, x, grads):
    outputs = run(x)
    torch.autograd.backward(outputs, grads)
    return outputs


def check(variants, x, grads):
    expected = [o.detach() for o in step(variants["stock"], x, grads)]
    for name, run in variants.items():
        for got, want in zip(step(run, x, grads), expected):
            torch.testing.assert_close(got.detach(), want, rtol=1e-4, atol=1e-4, msg=name)


def measure(variants, x, grads, rounds: int, reps: int, clock=time.perf_counter) -> dict[str, list[float]]:
    """Seconds per forward + backward: one untimed round, then `rounds`, each variant's turn rotating."""
    names = list(variants)
    times = {name: [] for name in names}
    for round_index in range(rounds + 1):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            start = clock()
            for _ in range(reps):
                step(variants[name], x, grads)
            if round_index:
                times[name].append((clock() - start) / reps)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--scale", type=int, default=1, help="divide every width by this (a quick dry run)")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: this process's CPU time (with OMP_NUM_THREADS=1 it leaves out the time other processes run "
        "on a shared machine, not their contention for caches and memory bandwidth)",
    )
    ns = parser.parse_args()
    clock = time.perf_counter if ns.clock == "wall" else time.process_time
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, tokens {ns.tokens}, r {ns.rank}, fp32, "
        f"{ns.clock} clock"
    )
    cases = {}
    for name, (fan_in, fan_out) in SINGLE.items():
        fan_in, fan_out = fan_in // ns.scale, fan_out // ns.scale
        cases[f"{name} {fan_in}->{fan_out}"] = (
            fan_in,
            variants_single(peft_linear(fan_in, fan_out, ns.rank, generator)),
        )
    for name, widths in GROUPS.items():
        widths = [w // ns.scale for w in widths]
        layers = [peft_linear(HIDDEN // ns.scale, w, ns.rank, generator) for w in widths]
        cases[f"{name} {HIDDEN // ns.scale}->{'+'.join(map(str, widths))}"] = (
            HIDDEN // ns.scale,
            variants_group(layers),
        )
    for label, (fan_in, variants) in cases.items():
        x = torch.randn(ns.tokens, fan_in, generator=generator).requires_grad_()
        grads = [o.detach().normal_(generator=generator) for o in variants["stock"](x)]
        check(variants, x, grads)
        times = measure(variants, x, grads, ns.rounds, ns.reps, clock)
        stock = statistics.median(times["stock"])
        row = ", ".join(
            f"{name} {statistics.median(t) * 1e3:.1f} ms ({stock / statistics.median(t):.2f}x, min {min(t) * 1e3:.1f})"
            for name, t in times.items()
        )
        print(f"{label}: {row}", flush=True)


if __name__ == "__main__":
    main()
