"""What kind of model this is: its task, seen through a PEFT wrapper, and what follows from the task.

* `unwrap(model)`: the Transformers model inside a wrapper. PEFT's `PeftModel*` (LoRA, prefix...)
  forwards to its base model; its `get_base_model()` is that model, whose modules (and LoRA layers) are
  the ones that run. Anything else is returned unchanged.
* `prompt_learning(model)`: a PEFT prompt-learning adapter (prompt tuning, p-tuning, prefix tuning: its active
  config's `is_prompt_learning`) as a `PromptLearning`, or None. Such a wrapper adds `num_virtual_tokens` learned
  positions before every row: prepended to the input embeddings (the base model's outputs are then
  [B, virtual + T, ...] for [B, T] inputs, its labels and mask prepended too), or, for prefix tuning, as keys and
  values in the cache (`in_cache`: outputs stay [B, T], positions start after the prefix). PEFT drops
  `position_ids` on every such call.
* `task_of(model)`: one of `TASKS` (masked-lm, causal-lm, seq2seq-lm, sequence-classification,
  token-classification) or None. Decided as Transformers decides: by the auto mappings
  (`MODEL_FOR_*_MAPPING_NAMES`), for the model's class or any class it derives from (a user's
  subclass), then by the class-name suffix (`...ForMaskedLM`) for models outside the mappings.
* `is_causal_lm(model)`: the label shift Trainer's loss makes (causal-LM mapping); whether attention is
  causal is a different question (`probes.has_causal_attention`).
* `is_seq2seq_lm(model)` and `decoder_input_ids(model, labels)`: an encoder-decoder LM (T5, BART, Marian,
  Whisper) builds its `decoder_input_ids` from the full [B, T] labels when it is given none (labels
  shifted right after the decoder start token, -100 read as padding); a pass that hands the model
  other labels must build them first, the model's own way (`hf_boundary.decoder_input_ids_from_labels`).
* `dropout_rate(model)`: the largest dropout probability its modules train with.

Reads class names, configs and module attributes only; never runs the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.models.auto import modeling_auto

from turbotrain.boundaries import hf_boundary

MASKED_LM = "masked-lm"
CAUSAL_LM = "causal-lm"
SEQ2SEQ_LM = "seq2seq-lm"
SEQUENCE_CLASSIFICATION = "sequence-classification"
TOKEN_CLASSIFICATION = "token-classification"
TASKS = (MASKED_LM, CAUSAL_LM, SEQ2SEQ_LM, SEQUENCE_CLASSIFICATION, TOKEN_CLASSIFICATION)
PER_TOKEN_TASKS = (MASKED_LM, CAUSAL_LM, TOKEN_CLASSIFICATION)  # labels [B, T] aligned with input_ids [B, T]

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
    ("ForConditionalGeneration", SEQ2SEQ_LM),
    ("ForMaskedLM", MASKED_LM),
    ("ForCausalLM", CAUSAL_LM),
    ("LMHeadModel", CAUSAL_LM),
    ("ForSequenceClassification", SEQUENCE_CLASSIFICATION),
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


# PEFT's prompt-learning types whose virtual tokens go in the cache (`past_key_values`), not before the inputs
VIRTUAL_TOKENS_IN_CACHE = ("PREFIX_TUNING", "CARTRIDGE")


@dataclass(frozen=True)
class PromptLearning:
    """A PEFT prompt-learning adapter: its method (PEFT's `peft_type`), how many virtual tokens it adds before
    every row, and whether they are keys and values in the cache (prefix tuning) rather than input embeddings."""

    method: str
    virtual_tokens: int
    in_cache: bool

    def __str__(self) -> str:
        where = "as keys and values before each row" if self.in_cache else "prepended to each row"
        return f"PEFT {self.method.lower().replace('_', ' ')} adds {self.virtual_tokens} virtual tokens {where}"


def prompt_learning(model: nn.Module) -> PromptLearning | None:
    """The prompt-learning adapter that runs in `model`'s calls (see the module docstring), or None."""
    if not is_peft_model(model):
        return None
    try:
        config = model.active_peft_config
    except Exception:  # a wrapper of another make: no prompt-learning config to read
        return None
    if not getattr(config, "is_prompt_learning", False):
        return None
    kind = getattr(config, "peft_type", "prompt learning")
    method = str(getattr(kind, "value", kind))
    virtual = getattr(config, "num_virtual_tokens", None)
    return PromptLearning(method, virtual if isinstance(virtual, int) else 0, method in VIRTUAL_TOKENS_IN_CACHE)


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


def is_seq2seq_lm(model: nn.Module) -> bool:
    """An encoder-decoder LM whose labels are the decoder's targets (T5, BART, Marian, Whisper)."""
    return task_of(model) == SEQ2SEQ_LM


def decoder_input_ids(model: nn.Module, labels: torch.Tensor) -> torch.Tensor:
    """The decoder inputs the seq2seq `model` would build from `labels` [B, T] -> [B, T]; raises if it cannot say."""
    built = hf_boundary.decoder_input_ids_from_labels(unwrap(model), labels)
    if built is None:
        raise ValueError(f"{type(unwrap(model)).__name__} has no known way to build decoder_input_ids from labels")
    return built


def decoder_length_limit(model: nn.Module) -> int | None:
    """The longest labels [B, T] the seq2seq `model` accepts (Whisper's `max_target_positions`), or None.

    The stock forward refuses longer labels with its own error; a pass that reshapes the labels must let
    that error through rather than hide it."""
    limit = getattr(unwrap(model).config, "max_target_positions", None)
    return limit if isinstance(limit, int) else None


def is_language_model(model: nn.Module) -> bool:
    """A model with a vocabulary head: masked, causal or sequence-to-sequence LM."""
    return task_of(model) in (MASKED_LM, CAUSAL_LM, SEQ2SEQ_LM)


def dropout_rate(model: nn.Module) -> float:
    """The largest dropout probability the model trains with: its `nn.Dropout` modules, and float attributes
    named like dropout on its modules (attention dropout is often a functional argument, SDPA's `dropout_p`,
    kept as a float on the attention module). Config fields no module reads (GPT-2's summary dropout) don't count."""
    rates = []
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            rates.append(module.p)
        rates += [v for k, v in vars(module).items() if "dropout" in k and isinstance(v, float)]
    return max(rates, default=0.0)


def _text_config(model: nn.Module):
    """The config of the text model (a multimodal config's `get_text_config()`), else the model's config."""
    config = unwrap(model).config
    return config.get_text_config() if hasattr(config, "get_text_config") else config
