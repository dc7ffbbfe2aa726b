"""Which task a Transformers model was trained for, and the module that exports its logits.

Tasks exported (the ones turbotrain trains; what a model's task is, its position limit and its sample
inputs are `modeling`'s): masked-LM and causal-LM (logits over the vocabulary, batch x sequence x vocab),
sequence classification (batch x labels) and token classification (batch x sequence x labels). Inputs
are `input_ids` and `attention_mask`, both batch x sequence int64, with the batch and sequence axes
dynamic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbotrain import modeling

INPUT_NAMES = ("input_ids", "attention_mask")
DYNAMIC_AXES = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}


@dataclass(frozen=True)
class Task:
    """An exported task: its name (`modeling`'s) and the axes of its logits."""

    name: str
    logits_axes: dict[int, str]

    @property
    def labels_per_token(self) -> bool:
        return self.name in modeling.PER_TOKEN_TASKS


TASKS = {
    t.name: t
    for t in (
        Task(modeling.MASKED_LM, {0: "batch", 1: "sequence"}),
        Task(modeling.CAUSAL_LM, {0: "batch", 1: "sequence"}),
        Task(modeling.SEQUENCE_CLASSIFICATION, {0: "batch"}),
        Task(modeling.TOKEN_CLASSIFICATION, {0: "batch", 1: "sequence"}),
    )
}


def exported_task(model: torch.nn.Module) -> Task:
    """How a model of `modeling.task_of(model)` is exported (e.g. RobertaForMaskedLM -> masked-lm); raises for
    a task turbotrain does not export."""
    task = modeling.task_of(model)
    if task == modeling.SEQ2SEQ_LM:
        inputs = getattr(modeling.unwrap(model), "main_input_name", "input_ids")
        raise ValueError(
            f"cannot export {type(model).__name__}: encoder-decoder models (seq2seq-lm: Whisper, T5, BART) are not "
            f"exported yet, for deployment or on-device training. Missing: graphs whose inputs are the encoder's "
            f"'{inputs}' plus 'decoder_input_ids' (the artifacts and manifest carry only input_ids and "
            "attention_mask), and a decoder-only training graph with the encoder run once outside it"
        )
    if task not in TASKS:
        known = ", ".join(sorted(TASKS))
        raise ValueError(
            f"cannot export {type(model).__name__} (task {task or 'unknown'}): turbotrain exports these tasks: {known}"
        )
    return TASKS[task]


def model_kwargs(model: torch.nn.Module) -> dict:
    """Keyword arguments that make a Transformers forward return a plain tuple with logits first."""
    kwargs = {"return_dict": False}
    if exported_task(model).name == modeling.CAUSAL_LM:
        kwargs["use_cache"] = False
    return kwargs


class LogitsModule(torch.nn.Module):
    """`forward(input_ids, attention_mask) -> logits` of a Transformers model, for export."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.kwargs = model_kwargs(model)

    def forward(self, *inputs):
        return self.model(**dict(zip(INPUT_NAMES, inputs)), **self.kwargs)[0]


def sample_inputs(model: torch.nn.Module, batch: int, length: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """`input_ids` and `attention_mask` [batch, length] of `modeling.synthetic_batch` (no special tokens,
    right-padded) at random lengths, row 0 keeping every token (the longest sequence is exercised)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    lengths[0] = length
    sample = modeling.synthetic_batch(model, lengths.tolist(), seed=seed, first_id=3)
    return sample["input_ids"].cpu(), sample["attention_mask"].cpu()
