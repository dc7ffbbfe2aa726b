"""`optimize(model)`: install turbotrain's model-level passes in place and report what applied.

The passes are the registry's (passes/registry.py), installed in their order, each from the options given
here over the defaults. Idempotent: a model that already carries the passes is returned as is. `undo()`
on the report removes them. Parameters a sharding engine holds (DeepSpeed ZeRO-3 partitions) are whole for the
install's self-checks, gathered the engine's way for their length only (passes/sharded.py). The fused optimizer
is not a model pass: use `fused_adamw(...)` in a custom loop, or `TurboTrainingArguments(fused_optimizer=True)`
(the default) with `TurboTrainer`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from turbotrain.passes import registry, sharded
from turbotrain.utils.warnings import log_once

REPORT_ATTRIBUTE = "_turbotrain_report"


@dataclass
class OptimizeReport:
    """What `optimize` installed on one model: `installed` (pass name -> installed pass, in install order),
    each also an attribute (`report.label_sparsity`, `report.padding_free`, ...: None when not installed), and
    `skipped`: the passes that refused this model (each said in one warning)."""

    model_name: str
    installed: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    not_applicable: dict[str, str] = field(default_factory=dict)  # pass name -> what the model lacks for it
    sharded_by: str | None = None  # the engine whose shards the parameters were at install (passes/sharded.py)

    def __getattr__(self, name: str):
        if name in registry.pass_names():
            return self.__dict__.get("installed", {}).get(name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    @property
    def applied(self) -> list[str]:
        return list(self.installed)

    def undo(self) -> None:
        for installed in reversed(list(self.installed.values())):
            installed.remove()
        self.installed.clear()
        self.skipped.clear()
        self.not_applicable.clear()

    def end_forward(self) -> None:
        """After a forward of the model raised: every installed pass drops what that forward left behind, so that
        the next forward (a retry at a smaller batch, an evaluation) starts clean. TurboTrainer calls it when a
        step raises; a loop of your own that catches a compiled model's exception and goes on should too."""
        failed = []
        for name, installed in self.installed.items():
            end_forward = getattr(installed, "end_forward", None)  # the hooked passes; others hold nothing
            try:
                if end_forward is not None:
                    end_forward()
            except Exception as error:  # noqa: BLE001  (every pass gets its turn; the first failure is raised after)
                failed.append((name, error))
        if failed:
            name, error = failed[0]
            raise RuntimeError(f"turbotrain: {name} could not end its forward state: {error}") from error

    def collator(self, inner, place: registry.StepPlace | None = None):
        """The training collator: `inner` wrapped by each installed pass's collator step (`PassSpec.collator`)
        for a step at `place`, the pass installed last innermost, so the passes' model pre-hooks (run in install
        order) take the keys off in the reverse order they were added. `inner` itself when no step wraps it
        (padding-free packs the padded batches; on an accelerator label sparsity adds its kept rows). `place`
        defaults to a step on the CPU in Trainer's loop."""
        place = place if place is not None else registry.StepPlace()
        collator = inner
        for name, installed in reversed(self.installed.items()):
            step = registry.get_pass(name).collator
            if step is not None:
                collator = step(installed, collator, place)
        return collator

    def __str__(self) -> str:
        applied = ", ".join(self.applied) or "none"
        return f"turbotrain passes on {self.model_name}: {applied}"


def optimize(
    model: nn.Module, *, self_check: bool = True, facts: registry.TrainerFacts | None = None, options=None, **named
) -> OptimizeReport:
    """Install the model-level passes on `model` (in place) and return what applied.

    `named`: any pass option by name (`label_sparsity=False`, `chunked_cross_entropy="always"`,
    `padding_free_with_dropout=True`, ...; each a field of its pass's options class, documented in its module),
    over `options` (the effective `TurboOptions`: TurboTrainer hands them here); the others keep their defaults. Padding-free training also needs the batches packed: pass your collator
    through `report.collator(collator)` (TurboTrainer does this for its training dataloader, with where its step
    runs: `report.collator(collator, StepPlace(device, in_trainer_loop))`).
    `facts`: what the caller's loss asks of the passes (`TrainerFacts`: TurboTrainer builds them once, for TRL's
    trainers from their row in integrations/trl/); e.g. `TrainerFacts(fused_call_weighting="equal")` lets the
    chunked head answer TRL's `fused_lm_head` calls for a loss that weights every token alike.
    """
    existing = getattr(model, REPORT_ATTRIBUTE, None)
    if existing is not None:
        return existing
    values = registry.option_values(named, options)
    report = OptimizeReport(model_name=type(model).__name__, sharded_by=sharded.engine_of(model))
    with sharded.whole_parameters(model) if self_check else contextlib.nullcontext():  # checks on whole weights
        _install(model, report, values, self_check, facts or registry.TrainerFacts())
    object.__setattr__(model, REPORT_ATTRIBUTE, report)
    return report


def _install(model: nn.Module, report: OptimizeReport, values, self_check: bool, facts) -> None:
    for spec in registry.model_passes():
        if not spec.is_on(values) or spec.part_of is not None:  # a part comes with the pass it is part of
            continue
        why = spec.not_applicable(model) if spec.not_applicable is not None else None
        if why is not None:  # the model has nothing for it (no token ids): one INFO line, no warning
            report.not_applicable[spec.name] = why
            log_once(f"turbotrain: {spec.name} does not apply: {why}")
            continue
        setup = registry.setup_for(spec, values, self_check, facts, report.installed)
        installed = registry.install_of(spec, facts)(model, setup)
        if installed is not None:
            report.installed[spec.name] = installed
            report.installed.update(getattr(installed, "parts", {}))  # its parts (PassSpec.part_of), by pass name
        elif spec.refused_for(model):
            report.skipped.append(spec.name)
