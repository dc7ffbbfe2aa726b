"""Worker of the sharded-engine tests: stock and turbotrain under the same engine, in one launch.

    torchrun --nproc_per_node=2 -m tests.scale.sharded_worker OUT zero3   # Trainer with deepspeed= (ZeRO-3)
    torchrun --nproc_per_node=2 -m tests.scale.sharded_worker OUT fsdp2   # torch's fully_shard, a plain loop
    torchrun --nproc_per_node=N -m tests.scale.sharded_worker OUT fsdp2 cuda   # one GPU per rank, NCCL

Model: Llama-shaped (vocabulary 32,000, hidden 64, 2 layers, grouped-query attention, untied head), the
same initial weights in both runs. Data: 32 rows of 12 to 40 tokens, the first half of each a prompt whose
labels are -100 (completion-only), right-padded per batch; 2 ranks x 4 rows, 4 steps.

zero3: `Trainer` and `TurboTrainer` with the same arguments and a ZeRO-3 config; the model is made after the
arguments, so Transformers builds it partitioned (`deepspeed.zero.Init`), as the passes then meet it at install.
fsdp2: `fully_shard` on each decoder layer and on the model, AdamW, the loss summed over a rank's labels and
divided by the global count (Trainer's `num_items_in_batch`); turbotrain's passes are installed with
`optimize()` before sharding, as Trainer does before Accelerate shards, and its batches packed by
`report.collator`.

Rank 0 writes OUT/result.json: per run the loss of each step, and for turbotrain its passes (and the summary
line under zero3); the largest weight difference of the trained models relative to the largest weight; and
under zero3 whether the head's weight was a partition again after training (no whole copy kept).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from datasets import Dataset
from transformers import AutoModelForCausalLM, LlamaConfig, Trainer, TrainingArguments

from tests.scale.deepspeed_comm import without_shm_comm_op
from tests.tiny_models import decoder_config
from tests.trainer_helpers import RightPaddingCollator
from turbotrain import TurboTrainer, TurboTrainingArguments, optimize

VOCAB = 32_000
ROWS, PER_RANK, STEPS, LR = 32, 4, 4, 1e-3
DEVICE = torch.device("cpu")  # a rank's GPU with `cuda` on the command line (Trainer picks its own under zero3)
TURBO = dict(chunked_cross_entropy="always")  # the chunked head takes every call ("auto" wants > 524 rows)
ZERO3 = {
    "zero_optimization": {"stage": 3},
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "zero_allow_untested_optimizer": True,
}


def config() -> LlamaConfig:
    return decoder_config(vocab_size=VOCAB, hidden=64, width=128)


def completion_rows(n: int = ROWS, seed: int = 0) -> Dataset:
    """Rows of 12 to 40 tokens; labels -100 over the first half (the prompt), the tokens over the rest."""
    generator = torch.Generator().manual_seed(seed)
    rows = {"input_ids": [], "labels": []}
    for length in torch.randint(12, 41, (n,), generator=generator).tolist():
        ids = torch.randint(3, VOCAB, (length,), generator=generator).tolist()
        prompt = length // 2
        rows["input_ids"].append(ids)
        rows["labels"].append([-100] * prompt + ids[prompt:])
    return Dataset.from_dict(rows)


# --- DeepSpeed ZeRO-3 through Trainer ------------------------------------------------------------------


def zero3_run(out: Path, turbo: bool) -> dict:
    import deepspeed

    arguments = dict(
        output_dir=str(out / ("turbo" if turbo else "stock")),
        deepspeed=ZERO3,
        per_device_train_batch_size=PER_RANK,
        max_steps=STEPS,
        learning_rate=LR,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
        # what TurboTrainingArguments sets by itself for CPU-only torchrun (args.py), stock gets too: without it
        # Accelerate runs stock as not distributed (the first run here logged 10.3907 where turbotrain's 10.3987)
        use_cpu=not torch.cuda.is_available(),
    )
    args = TurboTrainingArguments(**arguments, **TURBO) if turbo else TrainingArguments(**arguments)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config())  # partitioned as it is made: zero.Init
    trainer_class = TurboTrainer if turbo else Trainer
    trainer = trainer_class(
        model=model, args=args, train_dataset=completion_rows(), data_collator=RightPaddingCollator(0)
    )
    trainer.train()
    head = model.lm_head.weight
    result = {
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
        "head_partitioned": head.numel() == 0 and head.ds_tensor.numel() < head.ds_numel,
    }
    if turbo:
        result.update(passes=trainer.turbo_report.applied, summary=trainer.turbo_summary())
    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
        result["weights"] = {name: p.detach().clone() for name, p in model.named_parameters()}
    return result


# --- FSDP2: fully_shard on the CPU ---------------------------------------------------------------------


def fsdp2_run(out: Path, turbo: bool) -> dict:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config()).to(DEVICE)
    model.train()
    report = optimize(model, **TURBO) if turbo else None
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    padded = RightPaddingCollator(0)
    collator = report.collator(padded) if report is not None else padded
    rows, rank, world = completion_rows(), dist.get_rank(), dist.get_world_size()
    losses = []
    for step in range(STEPS):
        start = step * PER_RANK * world
        features = [rows[i] for i in range(start + rank * PER_RANK, start + (rank + 1) * PER_RANK)]
        everyone = [rows[i] for i in range(start, start + PER_RANK * world)]
        items = sum(sum(label != -100 for label in f["labels"][1:]) for f in everyone)  # causal: shifted
        batch = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in collator(features).items()}
        loss = model(**batch, num_items_in_batch=torch.tensor(items, device=DEVICE)).loss
        (loss * world).backward()  # FSDP averages the ranks' gradients: sum over every label / the global count
        optimizer.step()
        optimizer.zero_grad()
        step_loss = loss.detach().clone()
        dist.all_reduce(step_loss)
        losses.append(step_loss.item())
    result = {"losses": losses, "weights": {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}}
    if turbo:
        result["passes"] = report.applied
    return result


def largest_difference(stock: dict, turbo: dict) -> float:
    """max |turbo - stock| over every weight, relative to the largest stock weight."""
    gap = max((turbo[name] - weight).abs().max().item() for name, weight in stock.items())
    return gap / max(weight.abs().max().item() for weight in stock.values())


def main() -> None:
    global DEVICE
    out, engine = Path(sys.argv[1]), sys.argv[2]
    run = {"zero3": zero3_run, "fsdp2": fsdp2_run}[engine]
    if len(sys.argv) > 3 and sys.argv[3] == "cuda":
        DEVICE = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(DEVICE)
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 parity in fp32
    if engine == "zero3":
        without_shm_comm_op()  # no 45-90 s C++ build of a comm op these tests do not test (deepspeed_comm.py)
    if engine == "fsdp2":
        dist.init_process_group("nccl" if DEVICE.type == "cuda" else "gloo")
    stock, turbo = run(out, turbo=False), run(out, turbo=True)
    if dist.get_rank() == 0:
        result = {
            "stock": {k: v for k, v in stock.items() if k != "weights"},
            "turbo": {k: v for k, v in turbo.items() if k != "weights"},
            "weight_difference": largest_difference(stock["weights"], turbo["weights"]),
            "world_size": dist.get_world_size(),
        }
        (out / "result.json").write_text(json.dumps(result, indent=1))
    dist.barrier()  # a clean teardown: gloo's threads aborted one rank at exit once
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
