"""Bad training batches named before the first step, in one line that says what is wrong and what to do.

Stock Trainer meets the same batches later and less clearly: an index error deep in the model's embeddings, a
CUDA device-side assert, or no error at all (NaN weights). `checked_collator(inner, model, own_loss)` is the
user's collator with every batch it makes checked (`problem`); TurboTrainer's training dataloader uses it
innermost, before any pass's collator step (the padding-free packer), so the same check runs with padding-free on
or off. A bad batch raises one ValueError from the collator: Trainer collates a batch before its forward, so no
optimizer step has run on it. Evaluation keeps the user's collator.

Each check refuses only what stock fails on or trains wrong on, so no batch stock trains on is refused:

| check | refused | stock |
|---|---|---|
| positions | a row longer than `modeling.position_limit` (models with a learned position table): its length is its attention_mask row's sum, the batch's width without a mask, or the largest `position_ids` + 1 - offset where the batch carries them (TRL's packed rows) | an index error in the embeddings ("expanded size ... (200) ... (64)", "index out of range in self") |
| empty | a batch with no token at all | a reshape error in attention |
| token ids | an id < 0 or >= the input embedding's rows, for text models (a multimodal model swaps its image tokens' ids before the lookup) | "index out of range in self"; a device-side assert on CUDA |
| labels | a label other than -100 outside 0..classes-1 (the vocabulary for language models, `num_labels` for classifiers) | "Target 500 is out of bounds"; a device-side assert on CUDA |
| label shape | per-token tasks: labels of another shape than input_ids | a size mismatch in the loss (turbotrain's label sparsity blamed the head; padding-free trained on misaligned labels) |
| NaN | NaN in a float tensor (in labels only where the loss is the model's own: a custom loss may mask NaN labels) | trains on: NaN loss (logged as 0.0 by `logging_nan_inf_filter`), then NaN weights |

Labels are checked only where the loss is the model's own (`own_loss`: no `compute_loss` override, no
`compute_loss_func`); a plain `nn.Module` (no config) is not checked at all.

Cost per batch, on the host in the dataloader: a few reductions over the [B, L] integer tensors (the mask's row
sums, min and max of ids and labels) and `isnan` over float ones, microseconds beside a step. A tensor not on the
CPU is left unchecked (reading it would wait for the device).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from turbotrain import modeling

LABELLED_TASKS = (*modeling.PER_TOKEN_TASKS, modeling.SEQ2SEQ_LM)  # labels are classes of the output head
TOKEN_LABELS = (modeling.CAUSAL_LM, modeling.MASKED_LM, modeling.SEQ2SEQ_LM)  # ... which are token ids
SINGLE_LABEL = (None, "single_label_classification")  # a classifier's problem types with integer class labels


@dataclass(frozen=True)
class BatchLimits:
    """What a training batch must respect for `model` (None: not checked)."""

    model_name: str
    positions: int | None  # modeling.position_limit
    position_offset: int
    vocab: int | None  # input embedding rows, text models only
    classes: int | None  # labels' range, where the loss is the model's own
    token_labels: bool  # labels are token ids (language models), not classes
    per_token: bool  # labels [B, T] aligned with input_ids [B, T]
    nan_labels: bool  # NaN in labels is refused too


def limits_of(model: nn.Module, own_loss: bool) -> BatchLimits | None:
    """`model`'s limits, or None for a model that is not a Transformers model."""
    inner = modeling.unwrap(model)
    config = getattr(inner, "config", None)
    if config is None:
        return None
    task = modeling.task_of(model)
    text_only = not getattr(config, "sub_configs", None)
    return BatchLimits(
        model_name=type(inner).__name__,
        positions=modeling.position_limit(model),
        position_offset=modeling.position_offset(model),
        vocab=modeling.vocab_size(model) if text_only else None,
        classes=_label_classes(model, task, config) if own_loss else None,
        token_labels=task in TOKEN_LABELS,
        per_token=own_loss and task in modeling.PER_TOKEN_TASKS,
        nan_labels=own_loss,
    )


def _label_classes(model: nn.Module, task: str | None, config) -> int | None:
    if task in LABELLED_TASKS:
        return modeling.num_classes(model)
    labels = getattr(config, "num_labels", 0)
    single = getattr(config, "problem_type", None) in SINGLE_LABEL
    return labels if task == modeling.SEQUENCE_CLASSIFICATION and single and labels > 1 else None


class CheckedCollator:
    """Wraps a collator: collate as before, then refuse a bad batch (`problem`) with one ValueError."""

    def __init__(self, inner, limits: BatchLimits):
        self.inner, self.limits = inner, limits

    def __call__(self, features):
        batch = self.inner(features)
        found = problem(batch, self.limits) if hasattr(batch, "get") else None
        if found is not None:
            raise ValueError(found)
        return batch


def checked_collator(inner, model: nn.Module | None, own_loss: bool):
    """`inner` with its batches checked for `model`, or `inner` itself where nothing is checked."""
    limits = limits_of(model, own_loss) if inner is not None and model is not None else None
    return inner if limits is None else CheckedCollator(inner, limits)


def problem(batch, limits: BatchLimits) -> str | None:
    """The first thing wrong with `batch` for a model of `limits`, as one line, or None."""
    return (
        _empty(batch)
        or _too_long(batch, limits)
        or _outside_vocabulary(batch, limits)
        or _label_shape(batch, limits)
        or _labels_outside(batch, limits)
        or _nan(batch, limits)
    )


def _host(value) -> bool:
    return torch.is_tensor(value) and value.device.type == "cpu"


def _empty(batch) -> str | None:
    ids = batch.get("input_ids")
    if not (_host(ids) and ids.dim() == 2 and ids.shape[0] > 0 and ids.shape[1] == 0):
        return None
    return (
        f"turbotrain: a training batch has no tokens (its {ids.shape[0]} rows are all empty); drop empty rows "
        "from the dataset, e.g. dataset.filter(lambda row: len(row['input_ids']) > 0)"
    )


def _longest_row(batch, offset: int) -> int | None:
    """The longest row the model will number positions for (the module docstring's rule), or None."""
    positions = batch.get("position_ids")
    if _host(positions) and positions.numel() and not positions.is_floating_point():
        return int(positions.max()) + 1 - offset
    ids, mask = batch.get("input_ids"), batch.get("attention_mask")
    if not (_host(ids) and ids.dim() == 2 and ids.numel()):
        return None
    if _host(mask) and mask.shape == ids.shape:
        return int(mask.sum(-1).max())  # [B, L] -> [B] -> the longest
    return ids.shape[1]


def _too_long(batch, limits: BatchLimits) -> str | None:
    if limits.positions is None:
        return None
    longest = _longest_row(batch, limits.position_offset)
    if longest is None or longest <= limits.positions:
        return None
    limit = limits.positions
    return (
        f"turbotrain: a training row has {longest} tokens, but {limits.model_name} takes at most {limit} "
        f"(its position table); truncate in the tokenizer: tokenizer(..., truncation=True, max_length={limit})"
    )


def _outside_vocabulary(batch, limits: BatchLimits) -> str | None:
    ids = batch.get("input_ids")
    if limits.vocab is None or not (_host(ids) and ids.numel()) or ids.is_floating_point():
        return None
    low, high = int(ids.min()), int(ids.max())
    if 0 <= low and high < limits.vocab:
        return None
    return (
        f"turbotrain: token id {high if high >= limits.vocab else low} is outside {limits.model_name}'s "
        f"vocabulary of {limits.vocab} ids: the tokenizer does not match the model; use the model's own tokenizer, "
        "or call model.resize_token_embeddings(len(tokenizer)) after adding tokens"
    )


def _label_shape(batch, limits: BatchLimits) -> str | None:
    ids, labels = batch.get("input_ids"), batch.get("labels")
    if not (limits.per_token and torch.is_tensor(ids) and torch.is_tensor(labels)) or labels.shape == ids.shape:
        return None
    return (
        f"turbotrain: labels are {list(labels.shape)} but input_ids are {list(ids.shape)}: each token needs one "
        "label; pad labels to the inputs' length with -100 (DataCollatorForTokenClassification, "
        "DataCollatorForLanguageModeling)"
    )


def _labels_outside(batch, limits: BatchLimits) -> str | None:
    labels = batch.get("labels")
    if limits.classes is None or not (_host(labels) and labels.numel()) or labels.is_floating_point():
        return None
    bad, classes = _first_outside(labels, limits.classes), limits.classes
    if bad is None:
        return None
    if limits.token_labels:
        return (
            f"turbotrain: label {bad} is outside {limits.model_name}'s vocabulary of {classes} token ids (a label "
            "is a token id, or -100 for a position the loss skips); make labels with the model's own tokenizer"
        )
    return (
        f"turbotrain: label {bad} is outside {limits.model_name}'s {classes} classes (num_labels={classes}: a "
        f"label is 0..{classes - 1}, or -100 to skip); load the model with num_labels=<your number of classes>, "
        f"or map the labels to 0..{classes - 1}"
    )


def _first_outside(labels: torch.Tensor, classes: int) -> int | None:
    """A label other than -100 outside 0..classes-1, or None."""
    high = int(labels.max())
    if high >= classes:
        return high
    if int(labels.min()) >= 0:
        return None
    low = labels[labels != modeling.IGNORE_INDEX]
    return int(low.min()) if low.numel() and int(low.min()) < 0 else None


def _nan(batch, limits: BatchLimits) -> str | None:
    for key, value in batch.items():
        if key == "labels" and not limits.nan_labels:
            continue
        if _host(value) and value.is_floating_point() and bool(torch.isnan(value).any()):
            return (
                f"turbotrain: '{key}' holds NaN in a training batch: the loss, then every weight, would become NaN "
                "(stock Trainer trains on, logging the loss as 0.0); clean or drop those rows"
            )
    return None
