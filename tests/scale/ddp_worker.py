"""Worker of the data-parallel test: TurboTrainer on tiny RoBERTa, every pass on, a global batch of 4.

    torchrun --nproc_per_node=2 -m tests.scale.ddp_worker OUT PER_DEVICE_BATCH [BACKEND] [fsdp|zero1|zero2|zero3]
    python -m tests.scale.ddp_worker OUT 4                     (the single-process reference)

Rank 0 writes OUT/losses.json: after every optimizer step, the loss of the trained model on one fixed
held-out batch (the same for every run, so it compares the training itself, not Trainer's loss logging:
stock Trainer logs about world_size x the loss under CPU data parallel, and TurboTrainer logs what
stock does). No dropout: each rank draws its own masks, so only dropout-free runs can match a single
process step for step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import TrainerCallback

from tests.tiny_models import make
from tests.trainer_helpers import COMMON, dataset
from turbotrain import TurboTrainer, TurboTrainingArguments


class HeldOutLoss(TrainerCallback):
    def __init__(self):
        self.batch = {k: torch.tensor(v) for k, v in dataset(n=8, seed=123)[:].items()}
        self.losses: list[float] = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        model.eval()
        with torch.no_grad():
            self.losses.append(model(**self.batch).loss.item())
        model.train()


def main() -> None:
    out, per_device = Path(sys.argv[1]), int(sys.argv[2])
    engines = {"fsdp", "zero1", "zero2", "zero3"}
    backend = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] not in engines else "eager"
    extra = {"fsdp": "full_shard"} if "fsdp" in sys.argv else {}
    for stage in (1, 2, 3):
        if f"zero{stage}" in sys.argv:
            extra["deepspeed"] = {
                "zero_optimization": {"stage": stage},
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "zero_allow_untested_optimizer": True,
            }
    args = TurboTrainingArguments(
        output_dir=str(out / "run"),
        backend=backend,
        **{**COMMON, "per_device_train_batch_size": per_device, "max_steps": 8},
        **extra,
    )
    trainer = TurboTrainer(model=make("roberta", dropout=False), args=args, train_dataset=dataset(n=64))
    held_out = HeldOutLoss()
    trainer.add_callback(held_out)
    trainer.train()
    if trainer.args.process_index == 0:
        losses = held_out.losses
        wrapped = str(trainer.accelerator.distributed_type)
        (out / "losses.json").write_text(
            json.dumps(
                {
                    "losses": losses,
                    "world_size": trainer.args.world_size,
                    "wrapped": wrapped,
                    "passes": trainer.turbo_report.applied,
                    "threads": torch.get_num_threads(),
                }
            )
        )
    if torch.distributed.is_initialized():  # a clean teardown: gloo's threads aborted one rank at exit once
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
