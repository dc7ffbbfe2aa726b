"""Which task a Transformers model was trained for, and the module that exports its logits.

Tasks exported (the ones turbotrain trains): masked-LM and causal-LM (logits over the vocabulary,
batch x sequence x vocab), sequence classification (batch x labels) and token classification (batch x
sequence x labels). Inputs are `input_ids` and `attention_mask`, both batch x sequence int64, with the
batch and sequence axes dynamic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbotrain import modeling

INPUT_NAMES = ("input_ids", "attention_mask")
DYNAMIC_AXES = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}


@dataclass(frozen=True)
class Task:
    name: str
    logits_axes: dict[int, str]
    labels_per_token: bool


TASKS = {
    t.name: t
    for t in (
        Task("masked-lm", {0: "batch", 1: "sequence"}, True),
        Task("causal-lm", {0: "batch", 1: "sequence"}, True),
        Task("sequence-classification", {0: "batch"}, False),
        Task("token-classification", {0: "batch", 1: "sequence"}, True),
    )
}


def task_of(model: torch.nn.Module) -> Task:
    """The exported task of a Transformers model (`turbotrain.modeling.task_of`, e.g. RobertaForMaskedLM -> masked-lm)."""
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
    if task_of(model).name == "causal-lm":
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


def max_positions(model: torch.nn.Module) -> int:
    """The longest sequence the model's position table allows (RoBERTa reserves padding_idx + 1)."""
    config = model.config
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 4096
    if config.model_type in {"roberta", "xlm-roberta", "camembert"}:
        positions -= (config.pad_token_id or 0) + 1
    return int(positions)


def sample_inputs(model: torch.nn.Module, batch: int, length: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random token ids (no special tokens) and a right-padded attention mask (row 0 keeps every token)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, modeling.vocab_size(model), (batch, length), generator=generator)
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    lengths[0] = length
    attention_mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    return input_ids, attention_mask
