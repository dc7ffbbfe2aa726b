"""What the trainer decides from where the step runs: the training collator.

* `train_collator(trainer)`: the user's collator, then padding-free's packer (if installed), then, when the
  step runs on an accelerator inside Trainer's own loop, label sparsity's kept rows chosen on the host
  (passes/host_rows.py), so the step has no `nonzero` to wait for. None when nothing wraps the collator.
  A backend with a loop of its own (xla) shapes its batches itself and gets no host rows.

Whether parameters are sharded (FSDP, ZeRO-3) is `hf_boundary.shards_parameters`.
"""

from __future__ import annotations

from turbotrain.backends.base import Backend
from turbotrain.passes import host_rows


def train_collator(trainer):
    """The collator the training dataloader should use, or None for the user's own (see the module docstring)."""
    report, inner = trainer.turbo_report, trainer.data_collator
    if report is None or inner is None:
        return None
    collator = report.collator(inner)
    sparsity = report.label_sparsity
    if sparsity is not None and host_rows.wanted(trainer.args.device) and _runs_trainer_step(trainer.backend):
        collator = sparsity.host_rows_collator(collator)
    return None if collator is inner else collator


def _runs_trainer_step(backend: Backend) -> bool:
    """Trainer's own loop calls the model with the batch (a backend with its own loop replaces it)."""
    return type(backend).training_loop is Backend.training_loop
