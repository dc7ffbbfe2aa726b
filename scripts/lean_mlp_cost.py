"""What the lean gated MLP (passes/lean_gated_mlp.py) costs in time: one MLP at a published shape, forward and
backward, stock and lean interleaved, medians and their ratio.

    python scripts/lean_mlp_cost.py --hidden 896 --width 4864 --tokens 1425 --lora --reps 7

The default is Qwen2.5-0.5B's MLP (hidden 896, width 4,864, SiLU) on one packed DPO call of 1,425 tokens (the
preset's). `--lora`: PEFT LoRA r=16 on the three projections, run through turbotrain's fused LoRA op as a turbo
run would (frozen base, gradients for the adapters and the input); otherwise a full fine-tune. Memory is what
the end-to-end bench measures (`turbotrain bench --task dpo --shape qwen2.5-0.5b --lora --isolate`); here only
the time of making act(gate) and act(gate)*up again in the backward. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import copy
import platform
import statistics
import time

import torch
from torch import nn
from transformers import Qwen2Config
from transformers.models.qwen2.modeling_qwen2 import Qwen2MLP

from turbotrain.passes.fused_lora import apply_fused_lora
from turbotrain.passes.lean_gated_mlp import apply_lean_gated_mlp


def build(hidden: int, width: int, lora: bool) -> nn.Module:
    config = Qwen2Config(hidden_size=hidden, intermediate_size=width, num_attention_heads=1, num_key_value_heads=1)
    torch.manual_seed(0)
    mlp = Qwen2MLP(config)
    if not lora:
        return mlp
    from peft import LoraConfig, get_peft_model

    holder = nn.Module()
    holder.mlp = mlp
    lora_config = LoraConfig(r=16, lora_alpha=32, target_modules=["gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(holder, lora_config)
    apply_fused_lora(model)
    return model.base_model.model.mlp


def step_seconds(mlp: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> float:
    start = time.perf_counter()
    mlp(x).backward(grad)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--width", type=int, default=4864)
    parser.add_argument("--tokens", type=int, default=1425)
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    stock = build(args.hidden, args.width, args.lora)
    lean_holder = nn.Sequential(copy.deepcopy(stock))
    if args.lora:
        apply_fused_lora(lean_holder)
    assert apply_lean_gated_mlp(lean_holder) is not None
    lean = lean_holder[0]
    x = torch.randn(args.tokens, args.hidden, requires_grad=True)
    grad = torch.randn(args.tokens, args.hidden)
    times = {"stock": [], "lean": []}
    for rep in range(args.reps + 1):  # the first round warms up
        for name, mlp in (("stock", stock), ("lean", lean)) if rep % 2 == 0 else (("lean", lean), ("stock", stock)):
            seconds = step_seconds(mlp, x, grad)
            if rep:
                times[name].append(seconds)
    medians = {name: statistics.median(values) for name, values in times.items()}
    kind = "LoRA r=16 (fused)" if args.lora else "full"
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"MLP hidden {args.hidden}, width {args.width}, {args.tokens} tokens, {kind}, fp32, {args.reps} reps")
    for name, median in medians.items():
        print(f"{name}: median {median * 1e3:.1f} ms  ({', '.join(f'{t * 1e3:.1f}' for t in times[name])})")
    print(f"lean / stock: {medians['lean'] / medians['stock']:.3f}")


if __name__ == "__main__":
    main()
