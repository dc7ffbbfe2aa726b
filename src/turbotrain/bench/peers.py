"""The three peers of the benchmark, built the way a user would write them."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable

import torch
from transformers import Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback

from turbotrain.args import TurboTrainingArguments
from turbotrain.bench.workload import Workload
from turbotrain.data import MaskedLMData
from turbotrain.measure.flops import StepWork, batch_work
from turbotrain.measure.timing import StepClock
from turbotrain.trainer import TurboTrainer


def timed_train(make_trainer: Callable[[str], Trainer], memory) -> tuple[Trainer, list[float], float | None]:
    """One benchmark segment: the trainer `make_trainer(scratch_dir)` builds trains with its step times
    recorded and nothing printed; returns (trainer, seconds of each step, peak memory in MB or None)."""
    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer(tmp)
        clock = StepClock()
        trainer.add_callback(clock)
        trainer.remove_callback(PrinterCallback)
        memory.reset()
        trainer.train()
        return trainer, clock.step_seconds(), memory.peak_mb()


class CountingCollator:
    """The user's collator, unchanged, noting the real (unpadded) and padded tokens of every batch, and
    the work (bench/flops.py) each batch makes a model execute with and without packing and label sparsity."""

    def __init__(self, inner, causal: bool = False):
        self.inner = inner
        self.causal = causal
        self.real: list[int] = []
        self.padded: list[int] = []
        self.work: list[dict[tuple[bool, bool], StepWork]] = []  # (packed, sparse_head) -> work

    def __call__(self, features):
        batch = self.inner(features)
        mask = batch.get("attention_mask")
        if mask is None:
            mask = torch.ones_like(batch["input_ids"])
        self.real.append(int(mask.sum()))
        self.padded.append(mask.numel())
        self.work.append(
            {
                (packed, sparse): batch_work(batch, packed=packed, sparse_head=sparse, causal=self.causal)
                for packed in (False, True)
                for sparse in (False, True)
            }
        )
        return batch


def segment_arguments(output_dir: str, batch_size: int, steps: int, seed: int) -> dict:
    """Training arguments every benchmark segment shares: `steps` optimizer steps, a log line each, no saving."""
    return dict(
        output_dir=output_dir,
        per_device_train_batch_size=batch_size,
        max_steps=steps,
        learning_rate=1e-4,
        warmup_steps=0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=seed,
        dataloader_num_workers=0,
    )


def _common(workload: Workload, output_dir: str) -> dict:
    on_cpu = not torch.cuda.is_available()
    steps = workload.warmup + workload.steps
    return dict(
        **segment_arguments(output_dir, workload.batch_size, steps, workload.seed),
        bf16=workload.bf16,
        use_cpu=on_cpu and workload.bf16,
    )


def peer_backend(peer: str, default: str) -> tuple[str, dict | None]:
    """ "turbo" -> (default, None); "turbo:inductor" -> ("inductor", None);
    "turbo:inductor:scope=blocks" -> ("inductor", {"scope": "blocks"}) (options: key=value, comma-separated)."""
    parts = peer.split(":", 2)
    backend = parts[1] if len(parts) > 1 else default
    if len(parts) < 3:
        return backend, None
    options = dict(item.split("=", 1) for item in parts[2].split(","))
    return backend, {k: int(v) if v.isdigit() else v for k, v in options.items()}


def build_trainer(peer: str, workload: Workload, model, data: MaskedLMData, collator, output_dir: str) -> Trainer:
    """A fresh trainer for `peer` on a fresh copy of `model`."""
    if workload.task == "sft":
        from turbotrain.bench.sft import build_sft_trainer

        return build_sft_trainer(peer, model, data, collator, _common(workload, output_dir))
    model = copy.deepcopy(model)
    kw = dict(train_dataset=data.train, data_collator=collator)
    if peer == "stock":
        return Trainer(model=model, args=TrainingArguments(**_common(workload, output_dir)), **kw)
    if peer == "compiled":
        args = TrainingArguments(torch_compile=True, **_common(workload, output_dir))
        return Trainer(model=model, args=args, **kw)
    switched_off = {name: False for name in workload.turbo_off}
    backend, options = peer_backend(peer, workload.backend)
    args = TurboTrainingArguments(
        backend=backend, backend_options=options, **switched_off, **_common(workload, output_dir)
    )
    return TurboTrainer(model=model, args=args, **kw)
