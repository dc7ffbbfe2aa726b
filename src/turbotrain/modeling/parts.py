"""The model's parts that passes rewrite or size by: the head, the input embedding, their sizes, and the
stack of repeated blocks.

* `output_projection`, `output_linear`, `input_embedding`: the head and the input embedding that run,
  through PEFT's `modules_to_save` wrappers (the active adapter's trainable copy), or None where the model
  has none (`module_or_none`: speech and vision models raise `NotImplementedError` from
  `get_input_embeddings()`).
* `without_token_input(model)`: why a model takes no token ids through an input embedding table
  (`input_values`, `pixel_values`, CLIP's two towers), or None; every question here answers "none"
  (None, 0) for such a model, never raises.
* `vocab_size`, `pad_token_id`, `num_classes`: what token ids must stay below, the id padding takes, and
  how many values a label may take. `final_logit_softcapping(model)`: Gemma-2's logit cap, or None.
* `repeated_blocks(model)`: the model's stack of identical layers (GPT-2's `h`, BERT's `encoder.layer`,
  Llama's `layers`): the largest `nn.ModuleList` whose children are all of one class (at least two),
  what regional compilation compiles once and reuses.

Found through the model's accessors and module tree; never runs the model.
"""

from __future__ import annotations

from torch import nn

from turbotrain.modeling.tasks import (
    SEQUENCE_CLASSIFICATION,
    TOKEN_CLASSIFICATION,
    _text_config,
    task_of,
    unwrap,
)


def module_or_none(model: nn.Module, accessor: str) -> nn.Module | None:
    """What `model.<accessor>()` returns (`get_input_embeddings`, `get_output_embeddings`), or None where the
    model has none: no such method, the method raises (Transformers' `NotImplementedError` for speech and
    vision models, an `AttributeError` of a custom layout), or it returns something other than a module."""
    method = getattr(model, accessor, None)
    if not callable(method):
        return None
    try:
        found = method()
    except (NotImplementedError, AttributeError):
        return None
    return found if isinstance(found, nn.Module) else None


def output_projection(model: nn.Module) -> nn.Module | None:
    """The module that makes the logits (`get_output_embeddings()`; a PEFT `modules_to_save` wrapper as is)."""
    return module_or_none(unwrap(model), "get_output_embeddings")


def _active_copy(module: nn.Module) -> nn.Module:
    """Inside a PEFT `ModulesToSaveWrapper`, the copy that runs (the active adapter's, or the original)."""
    copies = getattr(module, "modules_to_save", None)
    original = getattr(module, "original_module", None)
    if not isinstance(copies, nn.ModuleDict) or original is None:
        return module
    if getattr(module, "disable_adapters", False):
        return original
    active = getattr(module, "active_adapter", None)
    active = active[0] if isinstance(active, (list, tuple)) and active else active
    return copies[active] if isinstance(active, str) and active in copies else original


def output_linear(projection: nn.Module | None) -> nn.Linear | None:
    """The plain `nn.Linear` that `projection` runs (through a `modules_to_save` wrapper), or None."""
    inner = _active_copy(projection) if projection is not None else None
    return inner if type(inner) is nn.Linear else None


def input_embedding(model: nn.Module) -> nn.Module | None:
    """The input embedding that runs (through a `modules_to_save` wrapper), or None (a model without one)."""
    embedding = module_or_none(unwrap(model), "get_input_embeddings")
    return _active_copy(embedding) if embedding is not None else None


def without_token_input(model: nn.Module) -> str | None:
    """Why `model` takes no token ids through an input embedding table, or None where it does.

    Speech and vision models take other inputs (`main_input_name`: `input_values`, `input_features`,
    `pixel_values`); a model of two towers (CLIP) has no one input embedding. Passes that rewrite token
    batches (padding-free) or the token embedding (its gradient buffer) do not apply to them."""
    inner = unwrap(model)
    main = getattr(inner, "main_input_name", "input_ids")
    if main != "input_ids":
        return f"{type(inner).__name__} takes {main}, not token ids"
    if vocab_size(model) is None:
        return f"{type(inner).__name__} has no input embedding table"
    return None


def final_logit_softcapping(model: nn.Module) -> float | None:
    """Gemma-2's `logits = c * tanh(logits / c)` cap c, or None."""
    config = _text_config(model)
    cap = getattr(config, "final_logit_softcapping", None)
    return float(cap) if cap else None


def vocab_size(model: nn.Module) -> int | None:
    """Rows of the input embedding table (what token ids must stay below), or None for a model without one."""
    rows = getattr(input_embedding(model), "num_embeddings", None)
    return rows if isinstance(rows, int) else None


def pad_token_id(model: nn.Module) -> int:
    pad = getattr(getattr(unwrap(model), "config", None), "pad_token_id", None)
    return pad if isinstance(pad, int) else 0


def num_classes(model: nn.Module) -> int:
    """How many values a label may take: the vocabulary for language models, `num_labels` for classifiers."""
    if task_of(model) in (SEQUENCE_CLASSIFICATION, TOKEN_CLASSIFICATION):
        return max(int(getattr(unwrap(model).config, "num_labels", 2)), 1)
    head = output_projection(model)
    out_features = getattr(head, "out_features", None)
    return out_features if isinstance(out_features, int) else vocab_size(model) or 1


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
