"""Eager cost of one Llama-3.2-1B layer's elementwise modules (RMSNorm, SwiGLU, RoPE), forward + backward.

    OMP_NUM_THREADS=1 python benchmarks/scripts/llama_elementwise_share.py --tokens 1024 --clock cpu

Transformers' own modules and functions (`LlamaRMSNorm`, `ACT2FN["silu"](gate) * up`,
`apply_rotary_pos_emb`; inputs made once, outside the timing; the gradients of the outputs are ones) at hidden 2048, MLP 8192, 32 / 8 heads of 64, fp32, inputs requiring grad; one
layer has two RMSNorms, one SwiGLU and one RoPE over q and k. Read against the layer's seven projections
(benchmarks/2026-12-01-cpu-fused-lora-op.md) to see how much of a step a fused rewrite could take off.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import LlamaConfig
from transformers.activations import ACT2FN
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb


def cases(tokens: int, config: LlamaConfig) -> dict:
    batch, length = 2, tokens // 2
    hidden, heads, kv, dim = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, 64
    norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps).requires_grad_(False)  # frozen, as in LoRA
    act = ACT2FN["silu"]
    positions = torch.arange(length)[None].expand(batch, -1)
    cos, sin = LlamaRotaryEmbedding(config)(torch.zeros(1), positions)

    x = torch.randn(batch, length, hidden, requires_grad=True)
    gate = torch.randn(batch, length, config.intermediate_size, requires_grad=True)
    up = torch.randn(batch, length, config.intermediate_size, requires_grad=True)
    q = torch.randn(batch, heads, length, dim, requires_grad=True)
    k = torch.randn(batch, kv, length, dim, requires_grad=True)
    return {
        "rmsnorm [N, 2048]": lambda: (norm(x),),
        "swiglu [N, 8192]": lambda: (act(gate) * up,),
        "rope q+k": lambda: apply_rotary_pos_emb(q, k, cos, sin),
    }


def run(forward) -> None:
    outputs = forward()
    torch.autograd.backward(outputs, [torch.ones_like(o) for o in outputs])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    ns = parser.parse_args()
    clock = time.perf_counter if ns.clock == "wall" else time.process_time
    config = LlamaConfig(
        hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8, head_dim=64
    )
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, tokens {ns.tokens}, fp32, {ns.clock} clock")
    for name, forward in cases(ns.tokens, config).items():
        run(forward)  # untimed
        times = []
        for _ in range(ns.rounds):
            start = clock()
            run(forward)
            times.append(clock() - start)
        print(f"{name}: {statistics.median(times) * 1e3:.1f} ms (min {min(times) * 1e3:.1f}) forward + backward")


if __name__ == "__main__":
    main()
