"""The aten ops one LoRA SFT training step dispatches (forward and backward), stock against turbotrain, counted
with a TorchDispatchMode: a proxy, on a CPU, for the kernels a GPU step launches, where small shapes are
launch-bound. Counts, not times: deterministic, so one run is the figure.

    python benchmarks/scripts/lora_step_op_counts.py --layers 24

Model: Qwen2.5-0.5B's layout (24 layers, 14 query heads and 2 KV heads of 64: GQA 7:1, tied embeddings) at tiny
widths (hidden 64, head dim 16, MLP 128, vocabulary 4,096), PEFT LoRA r=16 on q/k/v/o and the MLP projections,
fp32, 8 chat-like rows of 15-120 tokens, a third of each a prompt labelled -100. Ways:
* `stock (sdpa) padded`: the padded batch;
* `stock + flattening`: DataCollatorWithFlattening's one row, `use_cache=False` as Trainer sets it;
* `turbotrain, <kernel>`: `optimize(model)` (every default pass) and its collator, packed attention forced to
  `row_mask` (one masked SDPA call a layer: the call count of a one-launch varlen kernel, which runs on CUDA only)
  and to `per_length` (a call a sequence: what GQA calls took on torch 2.11's GPU, 2026-12-04).
"Compute ops" leave out the ops that only make views (no kernel on a GPU). Losses are printed beside: the same
step every way.
"""

from __future__ import annotations

import argparse
import collections
import copy

import torch
from torch.utils._python_dispatch import TorchDispatchMode

VIEWS = {
    "view", "t", "transpose", "unsqueeze", "squeeze", "expand", "slice", "as_strided", "_unsafe_view", "detach",
    "alias", "permute", "select", "_reshape_alias", "reshape", "split", "split_with_sizes", "unbind", "chunk",
    "lift_fresh", "narrow", "unflatten", "flatten",
}  # fmt: skip


class OpCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def build(layers: int):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(hidden_size=64, num_hidden_layers=layers, num_attention_heads=14, num_key_value_heads=2,
                         head_dim=16, intermediate_size=128, vocab_size=4096, tie_word_embeddings=True,
                         use_cache=False)  # fmt: skip
    torch.manual_seed(0)
    base = Qwen2ForCausalLM(config)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

    def lora():
        return get_peft_model(copy.deepcopy(base), LoraConfig(r=16, lora_alpha=32, target_modules=targets))

    return lora


def features() -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    rows = []
    for length in (37, 120, 64, 15, 90, 44, 71, 23):
        ids = torch.randint(3, 4096, (length,), generator=generator).tolist()
        rows.append({"input_ids": ids, "labels": [-100] * (length // 3) + ids[length // 3 :]})
    return rows


def padded(rows: list[dict]) -> dict:
    longest = max(len(r["input_ids"]) for r in rows)
    ids = torch.zeros(len(rows), longest, dtype=torch.long)
    mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[i, :n], mask[i, :n], labels[i, :n] = torch.tensor(r["input_ids"]), 1, torch.tensor(r["labels"])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def step(model, batch: dict) -> tuple[collections.Counter, float]:
    model.train()
    counting = OpCount()
    with counting:
        loss = model(**batch).loss
        loss.backward()
    return counting.ops, loss.item()


def main() -> None:
    from transformers import DataCollatorWithFlattening

    from turbotrain.passes.optimize import optimize
    from turbotrain.passes.padding_free import attention_kernels, kernel_choice

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=24)
    args = parser.parse_args()
    lora, rows = build(args.layers), features()
    results = {}
    model = lora()
    step(model, padded(rows))  # first call: lazy set-up out of the count
    results["stock (sdpa) padded"] = step(model, padded(rows))
    results["stock + flattening"] = step(lora(), DataCollatorWithFlattening(return_tensors="pt")(rows))
    attention_kernels.ROW_MASK_MAX_WASTE["cpu"] = 1e9  # the row mask takes these calls, as on a GPU
    for kernel in ("row_mask", "per_length"):
        model = lora()
        collate = optimize(model).collator(padded)
        with kernel_choice.forced(kernel):
            step(model, collate(rows))
            results[f"turbotrain, {kernel}"] = step(model, collate(rows))
    print("| way | ops | compute ops | attention calls | loss |\n|---|---|---|---|---|")
    for name, (ops, loss) in results.items():
        compute = sum(count for op, count in ops.items() if op not in VIEWS)
        attention = sum(count for op, count in ops.items() if "scaled_dot_product" in op and "backward" not in op)
        print(f"| {name} | {sum(ops.values()):,} | {compute:,} | {attention} | {loss:.5f} |")


if __name__ == "__main__":
    main()
