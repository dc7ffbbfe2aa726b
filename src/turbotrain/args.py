"""`TurboTrainingArguments`: `transformers.TrainingArguments` plus turbotrain's typed options.

Everything TrainingArguments accepts keeps its meaning. The added fields:

backend          "auto" | "eager" | "inductor" | "onnxruntime" (and any registered backend). "auto" picks per device.
backend_options  options of that backend (onnxruntime: providers, cache_dir, check_first_run, session_options).
label_sparsity   run the output head and loss only on rows with a label (exact; see passes/label_sparsity.py).
fused_optimizer  use the fused AdamW kernel where the device has one (exact; see passes/fused_optimizer.py).
padding_free     pack padded training batches into rows with per-sequence attention (see passes/padding_free.py).
max_tokens_per_batch  batches filled up to a token budget instead of a fixed size (data/token_budget.py).
embedding_grad   keep the input embedding's gradient in a persistent buffer (exact; passes/embedding_grad.py).

`optim="adamw_ort_fused"` (ORTTrainer's name) is accepted as the fused AdamW.
"""

from __future__ import annotations

import logging
import numbers
import os
from dataclasses import dataclass, field

import torch
from transformers import TrainingArguments

from turbotrain.backends import AUTO, resolve_backend_name, valid_choices
from turbotrain.passes.fused_optimizer import ORT_FUSED_ALIAS

logger = logging.getLogger("turbotrain")


def _cpu_only_multiprocess() -> bool:
    """Launched as several processes (torchrun, accelerate launch) on a machine with no GPU."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available() and not (
        hasattr(torch, "xpu") and torch.xpu.is_available())


@dataclass
class TurboTrainingArguments(TrainingArguments):
    backend: str = field(
        default=AUTO,
        metadata={"help": "What executes the step: 'auto' (eager on CPU, inductor on CUDA), 'eager', 'inductor'."},
    )
    label_sparsity: bool = field(
        default=True,
        metadata={"help": "Compute the output head and loss only on rows whose label is not -100 (exact)."},
    )
    fused_optimizer: bool = field(
        default=True,
        metadata={"help": "Use the fused AdamW kernel where the device has one, foreach otherwise (exact)."},
    )
    padding_free: bool = field(
        default=True,
        metadata={"help": "Pack padded training batches into rows with per-sequence attention, where the model "
                          "is supported and the collator pads (exact without dropout)."},
    )

    embedding_grad: bool = field(
        default=True,
        metadata={"help": "Accumulate the input embedding's gradient into a persistent buffer instead of a fresh "
                          "vocabulary-sized tensor every step (exact)."},
    )
    backend_options: dict | None = field(
        default=None,
        metadata={"help": "Options of the chosen backend, e.g. for 'onnxruntime': providers, cache_dir, "
                          "check_first_run, session_options (see turbotrain/backends/onnxruntime.py)."},
    )
    max_tokens_per_batch: int | None = field(
        default=None,
        metadata={"help": "Fill each training batch with examples up to this many tokens, instead of "
                          "per_device_train_batch_size examples (pairs well with padding_free)."},
    )

    def __post_init__(self):
        if str(self.optim) == ORT_FUSED_ALIAS:
            self.optim = "adamw_torch_fused"
        if self.backend not in valid_choices():
            raise ValueError(f"unknown backend '{self.backend}'; valid backends: {', '.join(valid_choices())}")
        for name in ("label_sparsity", "fused_optimizer", "padding_free", "embedding_grad"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        budget = self.max_tokens_per_batch
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1):
            raise ValueError(f"max_tokens_per_batch must be a positive whole number of tokens (an int) or None, "
                             f"got {budget!r}")
        if _cpu_only_multiprocess() and not self.use_cpu:
            # Without use_cpu, Accelerate treats a torchrun launch on a machine with no accelerator as
            # not distributed: no gradient all-reduce, and Trainer still scales the loss by the process count.
            logger.info("turbotrain: %s CPU processes and no accelerator: use_cpu=True (gloo data parallel)",
                        os.environ.get("WORLD_SIZE"))
            self.use_cpu = True
        super().__post_init__()

    @property
    def resolved_backend(self) -> str:
        """The backend name after resolving 'auto' for this run's device."""
        return resolve_backend_name(self.backend, self.device)


@dataclass(frozen=True)
class TurboOptions:
    """The turbotrain options of one run; plain TrainingArguments get the defaults."""

    backend: str = AUTO
    label_sparsity: bool = True
    fused_optimizer: bool = True
    padding_free: bool = True
    max_tokens_per_batch: int | None = None
    embedding_grad: bool = True

    @classmethod
    def from_args(cls, args: TrainingArguments) -> TurboOptions:
        if isinstance(args, TurboTrainingArguments):
            return cls(args.backend, args.label_sparsity, args.fused_optimizer, args.padding_free,
                       args.max_tokens_per_batch, args.embedding_grad)
        return cls()

    def backend_for(self, device: torch.device) -> str:
        return resolve_backend_name(self.backend, device)
