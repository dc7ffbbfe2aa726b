"""`optimize(model)`: install turbotrain's model-level passes in place and report what applied.

Idempotent: a model that already carries the passes is returned as is. `undo()` on the report removes
them. The fused optimizer is not a model pass: use `fused_adamw(...)` in a custom loop, or
`TurboTrainingArguments(fused_optimizer=True)` (the default) with `TurboTrainer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from turbotrain.modeling import is_language_model
from turbotrain.passes.chunked_ce import ChunkedHead, apply_chunked_ce
from turbotrain.passes.embedding_grad import BufferedEmbeddingGrad, apply_embedding_grad
from turbotrain.passes.fused_activation import FusedActivation, apply_fused_activation, has_tanh_gelu
from turbotrain.passes.label_sparsity import LabelSparsity, apply_label_sparsity
from turbotrain.passes.padding_free import PaddingFree, apply_padding_free

REPORT_ATTRIBUTE = "_turbotrain_report"


@dataclass
class OptimizeReport:
    """What `optimize` installed on one model."""

    model_name: str
    label_sparsity: LabelSparsity | None = None
    chunked_ce: ChunkedHead | None = None
    padding_free: PaddingFree | None = None
    embedding_grad: BufferedEmbeddingGrad | None = None
    fused_activation: FusedActivation | None = None
    skipped: list[str] = field(default_factory=list)

    @property
    def applied(self) -> list[str]:
        names = ("label_sparsity", "chunked_ce", "padding_free", "embedding_grad", "fused_activation")
        return [name for name in names if getattr(self, name) is not None]

    def undo(self) -> None:
        for name in reversed(self.applied):
            getattr(self, name).remove()
            setattr(self, name, None)
        self.skipped.clear()

    def collator(self, inner):
        """`inner` wrapped so its padded batches come out packed (unchanged if padding-free is off)."""
        return self.padding_free.collator(inner) if self.padding_free is not None else inner

    def __str__(self) -> str:
        applied = ", ".join(self.applied) or "none"
        return f"turbotrain passes on {self.model_name}: {applied}"


def optimize(
    model: nn.Module,
    *,
    label_sparsity: bool = True,
    padding_free: bool = True,
    padding_free_with_dropout: bool = False,
    padding_free_row_tokens: int | str = "auto",
    padding_free_attention: str = "packed",
    embedding_grad: bool = True,
    chunked_cross_entropy: str = "auto",
    fused_activation: bool = True,
    self_check: bool = True,
) -> OptimizeReport:
    """Install the model-level passes on `model` (in place) and return what applied.

    Padding-free training also needs the batches packed: pass your collator through
    `report.collator(collator)` (TurboTrainer does this for its training dataloader).
    `padding_free_with_dropout`: pack also a model that trains with dropout (other masks than stock's).
    `padding_free_row_tokens` ("auto", "longest", an int) and `padding_free_attention` ("packed", "masks"):
    row capacity with packed attention, and whether to try it (passes/padding_free.py).
    `chunked_cross_entropy` ("auto", "always", "never"): the chunked head behind label sparsity
    (passes/chunked_ce.py); "auto" uses it for calls whose kept logits would pass 64 MB.
    """
    existing = getattr(model, REPORT_ATTRIBUTE, None)
    if existing is not None:
        return existing
    report = OptimizeReport(model_name=type(model).__name__)
    if label_sparsity:
        report.label_sparsity = apply_label_sparsity(model, check=self_check)
        if report.label_sparsity is None and is_language_model(model):  # a classifier: nothing to refuse
            report.skipped.append("label_sparsity")
        report.chunked_ce = apply_chunked_ce(model, report.label_sparsity, chunked_cross_entropy, check=self_check)
    if padding_free:
        report.padding_free = apply_padding_free(
            model,
            check=self_check,
            with_dropout=padding_free_with_dropout,
            row_tokens=padding_free_row_tokens,
            attention=padding_free_attention,
        )
        if report.padding_free is None:
            report.skipped.append("padding_free")
    if embedding_grad:
        report.embedding_grad = apply_embedding_grad(model)
    if fused_activation:
        report.fused_activation = apply_fused_activation(model)
        if report.fused_activation is None and has_tanh_gelu(model):
            report.skipped.append("fused_activation")
    object.__setattr__(model, REPORT_ATTRIBUTE, report)
    return report
