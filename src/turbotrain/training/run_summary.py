"""The run's one summary line, logged at WARNING level when training begins.

Example scripts show WARNING and hide INFO (Transformers' default verbosity), so this is the one line
every user sees: what executes the step (the backend's `summary()`, with `auto`'s plan or choice),
which passes are active, the optimizer, and every requested pass that is not active and why
(turned off by an option, refused by the backend or by this trainer's loss, or refused by the pass for
this model). The passes and their labels are the registry's (passes/registry.py).

    turbotrain: backend auto: eager (...); passes: label_sparsity, embedding_grad; optim adamw_torch_fused;
    not active: padding_free (refused for this model: see the log above)

The same line goes to the trackers Trainer reports to (`report_to`) as run config (trackers.py), and
`MADE` keeps one `TrainerRecord` per turbotrain Trainer made in this process (`turbotrain run`'s last line).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from transformers import TrainerCallback

from turbotrain.passes import registry
from turbotrain.training import bf16_emulation
from turbotrain.training.trackers import report_summary

logger = logging.getLogger("turbotrain")


def summary_line(backend_summary: str, applied: list[str], optim: str, not_active: dict[str, str]) -> str:
    passes = ", ".join(applied) or "none"
    line = f"turbotrain: backend {backend_summary}; passes: {passes}; optim {optim}"
    if not_active:
        line += "; not active: " + "; ".join(f"{name} ({why})" for name, why in not_active.items())
    return line


def emulation_note(emulating: bool, has_units: bool | None = None) -> str:
    """The summary's bf16 emulation part (bf16_emulation.py): empty when it is off."""
    if not emulating:
        return ""
    if has_units is None:
        has_units = bf16_emulation.has_bf16_units()
    return "; " + (bf16_emulation.SUMMARY if not has_units else "bf16 emulated in fp32 GEMMs (bf16_emulation='on')")


def active_labels(report) -> list[str]:
    """The installed passes of an OptimizeReport (or None), each by its summary label."""
    installed = report.installed if report is not None else {}
    return [registry.get_pass(name).label_of(each) for name, each in installed.items()]


def not_active(
    requested,
    effective,
    applied: list[str],
    refused: dict[str, str],
    skipped: list[str] = (),
    not_applicable: dict[str, str] | None = None,
    engine: str | None = None,
) -> dict[str, str]:
    """Every requested pass that is not running, with why: option off, a backend or trainer refusal, the
    pass's own (`skipped`: its install refused the model, with a warning), or what the model lacks for it
    (`not_applicable`: no token ids for padding-free, no embedding table for its gradient buffer). A pass
    with nothing to do for a model that has what it needs (no tanh GELU to fuse, a classifier for label
    sparsity) is not listed. `engine`: the engine whose shards the parameters were when the passes were installed
    (a self-check that failed there is said to fail under it)."""
    reasons = {}
    for spec in registry.model_passes():
        name = spec.name
        if name in applied or not spec.listed_when_inactive:
            continue
        if not spec.is_on(requested):
            reasons[name] = "off by option"
        elif name in refused:
            reasons[name] = refused[name]
        elif spec.is_on(effective) and name in skipped:
            under = f" under {engine}" if engine else ""
            reasons[name] = f"refused for this model{under}: see the log above"
        elif spec.is_on(effective) and name in (not_applicable or {}):
            reasons[name] = f"does not apply: {not_applicable[name]}"
    return reasons


@dataclass
class TrainerRecord:
    """One turbotrain Trainer this process made: its class name and the summary of its last `train()`."""

    name: str
    summary: str | None = None


MADE: list[TrainerRecord] = []


class SummaryCallback(TrainerCallback):
    """Logs the trainer's summary line once per `train()` call, after every callback has planned, and
    hands it to the trackers (their own callbacks come first, so they are set up by then)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.record = TrainerRecord(type(trainer).__name__)
        MADE.append(self.record)

    def on_train_begin(self, args, state, control, **kwargs):
        self.record.summary = self.trainer.turbo_summary()
        if args.process_index == 0:
            logger.warning(self.record.summary)
            report_summary(self.trainer, self.record.summary)

    def on_train_end(self, args, state, control, **kwargs):
        """The record keeps the line as the run ended (`turbotrain run`'s last line): what a backend decided during
        the run (auto's measured choice) replaces its plan."""
        self.record.summary = self.trainer.turbo_summary()
