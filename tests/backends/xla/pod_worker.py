"""One host of a simulated pod, or the one-host reference: tiny RoBERTa MLM and GPT-2 through stock Trainer
and TurboTrainer(backend="xla"), every run at the same global batch of 8.

    python -m tests.backends.xla.pod_worker OUT_DIR GROUP RUN [RUN ...]

The test (test_pod.py) starts it once per host with the launch variables of a pod (JAX_COORDINATOR_ADDRESS /
JAX_NUM_PROCESSES / JAX_PROCESS_ID, or torchrun's MASTER_ADDR / MASTER_PORT / WORLD_SIZE / RANK) and
XLA_FLAGS=--xla_force_host_platform_device_count=N for N simulated devices per host. Each run trains in
OUT_DIR/RUN; after each run the host adds its result (losses, evaluation losses, grad norms, the backend's
report, median step time) to OUT_DIR/GROUP-host<process>.json, so the runs before a killed one are kept.
Runs that resume read the checkpoint the 2-host `gpt2` run wrote (OUT_DIR/gpt2/checkpoint-5).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from tests.tiny_models import make
from tests.trainer_helpers import SHORT_RUN, RightPaddingCollator, variable_length_dataset
from turbotrain import TurboTrainer, TurboTrainingArguments

GLOBAL_BATCH = 8
PAD = {"roberta": 1, "gpt2": 0}
COMMON = dict(SHORT_RUN, weight_decay=0.01, warmup_steps=2, eval_strategy="steps", eval_steps=5)
SAVING = dict(save_strategy="steps", save_steps=5)
# every batch pads to 40 tokens: one compiled shape per run; a lost host is declared after 10 s
XLA = {"length_buckets": [40], "label_row_buckets": 4, "host_timeout_s": 10}
KILL_AT_STEP = 7
HANG_AT_STEP = 2


class StepClock(TrainerCallback):
    """Wall time between the starts of consecutive steps. `halt_at` = (step, signal): after that step host 1
    sends itself the signal: SIGKILL (killed) or SIGSTOP (hung: its sockets stay open, nothing answers)."""

    def __init__(self, halt_at: tuple[int, int] | None = None):
        self.starts: list[float] = []
        self.halt_at = halt_at

    def on_step_begin(self, args, state, control, **kwargs):
        self.starts.append(time.perf_counter())

    def on_step_end(self, args, state, control, **kwargs):
        if self.halt_at is not None and self.halt_at[0] == state.global_step and process_index() == 1:
            (Path(args.output_dir) / "halted_at").write_text(str(time.time()))
            os.kill(os.getpid(), self.halt_at[1])

    def median_step_s(self, first_step: int, skip: set[int]) -> float | None:
        """Median start-to-start time from step `first_step` on, leaving out the steps in `skip` (compile,
        evaluation and checkpoint)."""
        steps = enumerate(zip(self.starts, self.starts[1:]), first_step)
        gaps = [b - a for step, (a, b) in steps if step not in skip]
        return statistics.median(gaps) if gaps else None


def process_index() -> int:
    import jax

    return jax.process_index()


def hosts_and_devices() -> tuple[int, int]:
    import jax

    return jax.process_count(), jax.local_device_count()


def train(
    family: str,
    out: Path,
    backend: str | None,
    shard: str = "data",
    devices: int | None = None,
    resume=None,
    halt_at: tuple[int, int] | None = None,
    **overrides,
) -> dict:
    """One run of 10 steps at a global batch of 8; backend None is stock Trainer."""
    data = variable_length_dataset(n=96, max_len=40)
    eval_data = variable_length_dataset(n=16, max_len=40, seed=1)
    collator = RightPaddingCollator(PAD[family])
    clock = StepClock(halt_at)
    common = {**COMMON, **overrides, "output_dir": str(out)}
    if backend is None:  # under torchrun: stock DDP over gloo (use_cpu), the global batch split over the processes
        processes = int(os.environ.get("WORLD_SIZE", "1"))
        ddp = {"use_cpu": True} if processes > 1 else {}
        args = TrainingArguments(per_device_train_batch_size=GLOBAL_BATCH // processes, **{**ddp, **common})
        trainer_class = Trainer
    else:
        mesh_devices = devices or int(os.environ["POD_DEVICES"])  # the pod's devices, all hosts together
        options = {**XLA, "shard": shard, **({"num_devices": devices} if devices else {})}
        args = TurboTrainingArguments(
            per_device_train_batch_size=GLOBAL_BATCH // mesh_devices, backend=backend, backend_options=options, **common
        )
        trainer_class = TurboTrainer
    trainer = trainer_class(
        model=make(family, dropout=False),
        args=args,
        train_dataset=data,
        eval_dataset=eval_data,
        data_collator=collator,
        callbacks=[clock],
    )
    trainer.train(resume_from_checkpoint=resume)
    history = trainer.state.log_history
    first_step = trainer.state.global_step - len(clock.starts) + 1  # after a resume: the first step run here
    return {
        "losses": [h["loss"] for h in history if "loss" in h],
        "steps": [h["step"] for h in history if "loss" in h],
        "eval": [h["eval_loss"] for h in history if "eval_loss" in h],
        "grad_norms": [h["grad_norm"] for h in history if "grad_norm" in h],
        "report": trainer.backend.report() if backend else {},
        "median_step_s": clock.median_step_s(first_step, {first_step, 5, 10}),
        "saved": sorted(p.name for p in out.glob("checkpoint-*")) if out.exists() else [],
    }


def bf16_matmuls(family: str = "gpt2") -> dict:
    """How many of the compiled loss's matrix products take bf16 operands, without and with bf16 autocast."""
    import jax

    from tests.tiny_models import padded_batch
    from turbotrain.backends.xla.batches import BatchLayout, step_arrays
    from turbotrain.backends.xla.mesh import data_parallel_mesh
    from turbotrain.backends.xla.optimizer import torch_adamw
    from turbotrain.backends.xla.state import split_parameters
    from turbotrain.backends.xla.step import CompiledStep

    model = make(family, dropout=False).train()
    trainable, frozen = split_parameters(model)
    arrays = step_arrays([padded_batch([20, 9], pad_token_id=PAD[family])], BatchLayout(2, 1, PAD[family]))
    micro = {name: value[0] for name, value in arrays.items()}
    counts = {}
    for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
        adamw = torch_adamw(0.9, 0.999, 1e-8, 0.0, {n: True for n in trainable})
        step = CompiledStep(model, None, adamw, data_parallel_mesh(1), autocast_dtype=dtype)
        text = jax.jit(step._micro_loss, static_argnums=5).lower(trainable, frozen, micro, None, jax.random.key(0), 1)
        dots = [line for line in text.as_text().splitlines() if "dot_general" in line]
        counts[name] = {"dots": len(dots), "bf16_dots": sum("bf16" in line for line in dots)}
    return counts


def checkpoint(out: Path) -> str:
    return str(out.parent / "gpt2" / "checkpoint-5")


RUNS = {
    # on the pod: the data-parallel runs write checkpoint-5; host 1 is killed after step 7 or hangs after step 2
    "roberta": lambda out: train("roberta", out, "xla", **SAVING),
    "gpt2": lambda out: train("gpt2", out, "xla", **SAVING),
    "gpt2_killed": lambda out: train("gpt2", out, "xla", halt_at=(KILL_AT_STEP, signal.SIGKILL), **SAVING),
    "gpt2_hung": lambda out: train("gpt2", out, "xla", halt_at=(HANG_AT_STEP, signal.SIGSTOP)),
    "gpt2_killed_resumed": lambda out: train("gpt2", out.parent / "gpt2_killed", "xla", resume=True, **SAVING),
    "gpt2_fsdp": lambda out: train("gpt2", out, "xla", shard="fsdp"),
    "roberta_fsdp": lambda out: train("roberta", out, "xla", shard="fsdp"),
    # one host: the references, and the pod's checkpoint resumed on 1 device and on eager
    "stock_roberta": lambda out: train("roberta", out, None),
    "stock_gpt2": lambda out: train("gpt2", out, None),
    "xla4_roberta": lambda out: train("roberta", out, "xla", devices=4),
    "xla4_gpt2": lambda out: train("gpt2", out, "xla", devices=4),
    "resumed_xla1": lambda out: train("gpt2", out, "xla", devices=1, resume=checkpoint(out), **SAVING),
    "resumed_eager": lambda out: train("gpt2", out, None, resume=checkpoint(out), **SAVING),
    "stock_bf16": lambda out: train("gpt2", out, None, bf16=True, use_cpu=True),
    "xla_bf16": lambda out: train("gpt2", out, "xla", devices=4, bf16=True, use_cpu=True),
    "bf16_matmuls": lambda out: bf16_matmuls(),
}


def main(out: Path, group: str, runs: list[str]) -> None:
    import jax

    # the resumed and repeated runs compile programs an earlier process compiled: take them from a cache
    jax.config.update("jax_compilation_cache_dir", str(out / "jax-cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    torch.set_num_threads(1)
    results = {}
    for name in runs:
        results[name] = RUNS[name](out / name)
        hosts, devices = hosts_and_devices()
        results["pod"] = {"hosts": hosts, "devices_per_host": devices, "process": process_index()}
        (out / f"{group}-host{process_index()}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
