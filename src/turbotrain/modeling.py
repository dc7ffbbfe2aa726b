"""The one place that understands models: what task, which head, causal or not, and a synthetic batch.

Every pass and the exporter ask this module, so a new model kind (a PEFT wrapper, an encoder-decoder)
is taught here once.

* `unwrap(model)`: the Transformers model inside a wrapper. PEFT's `PeftModel*` (LoRA, prefix...)
  forwards to its base model; its `get_base_model()` is that model, whose modules (and LoRA layers) are
  the ones that run. Anything else is returned unchanged.
* `task_of(model)`: one of `TASKS` (masked-lm, causal-lm, seq2seq-lm, sequence-classification,
  token-classification) or None. Decided as Transformers decides: by the auto mappings
  (`MODEL_FOR_*_MAPPING_NAMES`), for the model's class or any class it derives from (a user's
  subclass), then by the class-name suffix (`...ForMaskedLM`) for models outside the mappings.
* `is_causal_lm(model)`: the label shift Trainer's loss makes (causal-LM mapping); `has_causal_attention`
  whether attention is causal whatever the head (a decoder classifier too).
* `position_offset(model)`: where position ids start (RoBERTa-style embeddings: padding_idx + 1).
* `repeated_blocks(model)`: the model's stack of identical layers (GPT-2's `h`, BERT's `encoder.layer`,
  Llama's `layers`): the largest `nn.ModuleList` whose children are all of one class (at least two),
  what regional compilation compiles once and reuses.
* `synthetic_batch(model, ...)`: a small deterministic batch (private RNG, training RNG untouched) of
  uneven, right-padded rows with labels that fit the task: token ids for language models, class ids
  below `num_labels` for token and sequence classification. The self-checks of the passes and the
  exporter's sample inputs come from here.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.auto import modeling_auto

IGNORE_INDEX = -100  # the label Transformers' losses skip

MASKED_LM = "masked-lm"
CAUSAL_LM = "causal-lm"
SEQ2SEQ_LM = "seq2seq-lm"
SEQUENCE_CLASSIFICATION = "sequence-classification"
TOKEN_CLASSIFICATION = "token-classification"
TASKS = (MASKED_LM, CAUSAL_LM, SEQ2SEQ_LM, SEQUENCE_CLASSIFICATION, TOKEN_CLASSIFICATION)
PER_TOKEN_TASKS = (MASKED_LM, CAUSAL_LM, SEQ2SEQ_LM, TOKEN_CLASSIFICATION)

# checked in this order: a class in several mappings takes the first (seq2seq before causal: BART's
# `BartForCausalLM` is causal, `BartForConditionalGeneration` is seq2seq)
_MAPPINGS = (
    (SEQ2SEQ_LM, "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    (SEQ2SEQ_LM, "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
    (CAUSAL_LM, "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    (MASKED_LM, "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    (SEQUENCE_CLASSIFICATION, "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    (TOKEN_CLASSIFICATION, "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
)
_SUFFIXES = (
    ("ForConditionalGeneration", SEQ2SEQ_LM), ("ForMaskedLM", MASKED_LM), ("ForCausalLM", CAUSAL_LM),
    ("LMHeadModel", CAUSAL_LM), ("ForSequenceClassification", SEQUENCE_CLASSIFICATION),
    ("ForTokenClassification", TOKEN_CLASSIFICATION),
)


def unwrap(model: nn.Module) -> nn.Module:
    """The Transformers model inside a PEFT wrapper (or `model` itself)."""
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base) and type(model).__name__.startswith("Peft"):
        base = get_base()
        if isinstance(base, nn.Module) and base is not model:
            return base
    return model


def is_peft_model(model: nn.Module) -> bool:
    return unwrap(model) is not model


def _mapping_names(attribute: str) -> set[str]:
    return set(getattr(modeling_auto, attribute, {}).values())


def _class_names(model: nn.Module) -> list[str]:
    return [cls.__name__ for cls in type(unwrap(model)).__mro__]


def task_of(model: nn.Module) -> str | None:
    """The model's task (one of TASKS), or None for a model of another kind (QA, a bare base model...)."""
    names = _class_names(model)
    for task, attribute in _MAPPINGS:
        if _mapping_names(attribute).intersection(names):
            return task
    for name in names:
        for suffix, task in _SUFFIXES:
            if name.endswith(suffix):
                return task
    return None


def is_causal_lm(model: nn.Module) -> bool:
    """True where Trainer's loss shifts the labels by one (causal-LM heads, through wrappers too)."""
    return task_of(model) == CAUSAL_LM


def is_language_model(model: nn.Module) -> bool:
    """A model with a vocabulary head: masked, causal or sequence-to-sequence LM."""
    return task_of(model) in (MASKED_LM, CAUSAL_LM, SEQ2SEQ_LM)


def has_causal_attention(model: nn.Module) -> bool:
    """True when the model's attention layers are causal (their `is_causal` flag), whatever its head."""
    inner = unwrap(model)
    flags = [m.is_causal for m in inner.modules() if isinstance(getattr(m, "is_causal", None), bool)]
    return any(flags) or bool(getattr(inner.config, "is_decoder", False)) or is_causal_lm(inner)


def position_offset(model: nn.Module) -> int:
    """RoBERTa-style embeddings count positions from padding_idx + 1; others from 0."""
    inner = unwrap(model)
    embeddings = getattr(getattr(inner, "base_model", inner), "embeddings", None)
    if embeddings is not None and hasattr(embeddings, "create_position_ids_from_input_ids"):
        return int(embeddings.padding_idx) + 1
    return 0


def vocab_size(model: nn.Module) -> int:
    """Rows of the input embedding table (what token ids must stay below)."""
    return unwrap(model).get_input_embeddings().num_embeddings


def pad_token_id(model: nn.Module) -> int:
    pad = getattr(unwrap(model).config, "pad_token_id", None)
    return int(pad) if pad is not None else 0


def num_classes(model: nn.Module) -> int:
    """How many values a label may take: the vocabulary for language models, `num_labels` for classifiers."""
    if task_of(model) in (SEQUENCE_CLASSIFICATION, TOKEN_CLASSIFICATION):
        return max(int(getattr(unwrap(model).config, "num_labels", 2)), 1)
    head = unwrap(model).get_output_embeddings()
    return getattr(head, "out_features", None) or vocab_size(model)


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The blocks of the largest ModuleList of >= 2 modules of one class ([] if the model has none)."""
    best: list[nn.Module] = []
    best_size = 0
    for module in unwrap(model).modules():
        if not isinstance(module, nn.ModuleList) or len(module) < 2:
            continue
        children = list(module)
        if len({type(child) for child in children}) != 1:
            continue
        size = sum(p.numel() for p in module.parameters())
        if size > best_size:
            best, best_size = children, size
    return best


def synthetic_batch(model: nn.Module, lengths: list[int], *, seed: int, ignore_every: int = 0,
                    first_id: int = 4) -> dict[str, torch.Tensor]:
    """A right-padded batch of `len(lengths)` rows with labels fitting the model's task, on its device.

    input_ids [B, T] in [first_id, vocab) (special ids below first_id stay out), pad where the
    attention mask is 0; labels: [B] classes for sequence classification, else [B, T] with -100 on
    padding and on every `ignore_every`-th position (0: none); token ids for language models, class
    ids for token classification. Drawn from a private generator seeded with `seed`.
    """
    generator = torch.Generator().manual_seed(seed)
    rows, length = len(lengths), max(lengths)
    input_ids = torch.randint(first_id, max(vocab_size(model), first_id + 1), (rows, length), generator=generator)
    attention_mask = (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).long()
    input_ids[attention_mask == 0] = pad_token_id(model)
    task = task_of(model)
    if task == SEQUENCE_CLASSIFICATION:
        labels = torch.randint(0, num_classes(model), (rows,), generator=generator)
    else:
        labels = input_ids.clone() if task != TOKEN_CLASSIFICATION else \
            torch.randint(0, num_classes(model), (rows, length), generator=generator)
        labels[attention_mask == 0] = IGNORE_INDEX
        if ignore_every:
            labels[:, ::ignore_every] = IGNORE_INDEX
    device = next(model.parameters()).device
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    return {name: tensor.to(device) for name, tensor in batch.items()}
