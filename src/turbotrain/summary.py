"""The run's one summary line, logged at WARNING level when training begins.

Example scripts show WARNING and hide INFO (Transformers' default verbosity), so this is the one line
every user sees: what executes the step (the backend's `summary()`, with `auto`'s plan or choice),
which passes are active, the optimizer, and every requested pass that is not active and why
(turned off by an option, refused by the backend, or refused by the pass for this model).

    turbotrain: backend auto: eager (...); passes: label_sparsity, embedding_grad; optim adamw_torch_fused;
    not active: padding_free (refused for this model: see the warning above)
"""

from __future__ import annotations

import logging

from transformers import TrainerCallback

logger = logging.getLogger("turbotrain")
PASSES = ("label_sparsity", "padding_free", "embedding_grad", "fused_activation")


def summary_line(backend_summary: str, applied: list[str], optim: str, not_active: dict[str, str]) -> str:
    passes = ", ".join(applied) or "none"
    line = f"turbotrain: backend {backend_summary}; passes: {passes}; optim {optim}"
    if not_active:
        line += "; not active: " + "; ".join(f"{name} ({why})" for name, why in not_active.items())
    return line


def not_active(
    requested,
    effective,
    applied: list[str],
    refused: dict[str, str],
    skipped: list[str] = (),
    not_applicable: dict[str, str] | None = None,
) -> dict[str, str]:
    """Every requested pass that is not running, with why: option off, a backend or trainer refusal, the
    pass's own (`skipped`: its install refused the model, with a warning), or what the model lacks for it
    (`not_applicable`: no token ids for padding-free, no embedding table for its gradient buffer). A pass
    with nothing to do for a model that has what it needs (no tanh GELU to fuse, a classifier for label
    sparsity) is not listed."""
    reasons = {}
    for name in PASSES:
        if name in applied:
            continue
        if not getattr(requested, name):
            reasons[name] = "off by option"
        elif name in refused:
            reasons[name] = refused[name]
        elif getattr(effective, name) and name in skipped:
            reasons[name] = "refused for this model: see the warning above"
        elif getattr(effective, name) and name in (not_applicable or {}):
            reasons[name] = f"does not apply: {not_applicable[name]}"
    return reasons


class SummaryCallback(TrainerCallback):
    """Logs the trainer's summary line once per `train()` call, after every callback has planned."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        if args.process_index == 0:
            logger.warning(self.trainer.turbo_summary())
