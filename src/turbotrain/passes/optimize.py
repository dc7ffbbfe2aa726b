"""`optimize(model)`: install turbotrain's model-level passes in place and report what applied.

Idempotent: a model that already carries the passes is returned as is. `undo()` on the report removes
them. The fused optimizer is not a model pass: use `fused_adamw(...)` in a custom loop, or
`TurboTrainingArguments(fused_optimizer=True)` (the default) with `TurboTrainer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from turbotrain.passes.label_sparsity import LabelSparsity, apply_label_sparsity

REPORT_ATTRIBUTE = "_turbotrain_report"


@dataclass
class OptimizeReport:
    """What `optimize` installed on one model."""

    model_name: str
    label_sparsity: LabelSparsity | None = None
    skipped: list[str] = field(default_factory=list)

    @property
    def applied(self) -> list[str]:
        return ["label_sparsity"] if self.label_sparsity is not None else []

    def undo(self) -> None:
        if self.label_sparsity is not None:
            self.label_sparsity.remove()
            self.label_sparsity = None

    def __str__(self) -> str:
        applied = ", ".join(self.applied) or "none"
        return f"turbotrain passes on {self.model_name}: {applied}"


def optimize(model: nn.Module, *, label_sparsity: bool = True, self_check: bool = True) -> OptimizeReport:
    """Install the model-level passes on `model` (in place) and return what applied."""
    existing = getattr(model, REPORT_ATTRIBUTE, None)
    if existing is not None:
        return existing
    report = OptimizeReport(model_name=type(model).__name__)
    if label_sparsity:
        report.label_sparsity = apply_label_sparsity(model, check=self_check)
        if report.label_sparsity is None:
            report.skipped.append("label_sparsity")
    object.__setattr__(model, REPORT_ATTRIBUTE, report)
    return report
