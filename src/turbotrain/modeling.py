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
  whether attention is causal whatever the head (a decoder classifier too; not BERT's causal-LM head on a
  config without `is_decoder`, which attends both ways).
* `is_seq2seq_lm(model)` and `decoder_input_ids(model, labels)`: an encoder-decoder LM (T5, BART, Marian,
  Whisper) builds its `decoder_input_ids` from the full [B, T] labels when it is given none (labels
  shifted right after the decoder start token, -100 read as padding); a pass that hands the model
  other labels must build them first, the model's own way (`hf_boundary.decoder_input_ids_from_labels`).
* `output_projection`, `output_linear`, `input_embedding`: the head and the input embedding that run,
  through PEFT's `modules_to_save` wrappers (the active adapter's trainable copy), or None where the model
  has none (`module_or_none`: speech and vision models raise `NotImplementedError` from
  `get_input_embeddings()`); `without_token_input(model)`: why a model takes no token ids through an input
  embedding table (`input_values`, `pixel_values`, CLIP's two towers), or None; every question below answers
  "none" (None, 0) for such a model, never raises;
  `final_logit_softcapping(model)`: Gemma-2's logit cap, or None.
* `attends_ahead(model)`, `reads_masked_positions(model)`: what one tiny no-grad forward of the base model
  shows (None where it cannot run on `input_ids`): whether the first position sees the last token (causal
  or not, for layers without `is_causal` flags), and whether real tokens see the ids the attention mask
  hides (ConvBERT's convolution, MobileBERT's trigram embedding, FNet), which padding-free cannot pack.
* `position_offset(model)`: where position ids start (RoBERTa-style embeddings: padding_idx + 1);
  `max_positions(model)`: the longest sequence its position table allows, that offset taken off.
* `attention_spans(model)`: the window and chunk sizes its attention layers apply (`sliding_window`:
  Mistral, Gemma-2/3, Qwen2 with `use_sliding_window`, Phi-3, Cohere2, GPT-OSS; ModernBERT's
  `local_attention`; Llama-4's `attention_chunk_size`), those below its position limit; `[]` when every
  layer attends the whole sequence. `layer_types(model)`: the config's per-layer attention kinds.
* `length_dependent_rope(model)`: ("longrope", original limit) or ("dynamic", limit) where the rotary
  frequencies depend on the batch's largest position (Phi-3's LongRoPE switches to its long factors past
  `original_max_position_embeddings`; dynamic NTK rescales past `max_position_embeddings`, and keeps the
  rescaled table for later calls), else None.
* `repeated_blocks(model)`: the model's stack of identical layers (GPT-2's `h`, BERT's `encoder.layer`,
  Llama's `layers`): the largest `nn.ModuleList` whose children are all of one class (at least two),
  what regional compilation compiles once and reuses.
* `synthetic_batch(model, ...)`: a small deterministic batch (private RNG, training RNG untouched) of
  uneven, right-padded rows with labels that fit the task: token ids for language models, class ids
  below `num_labels` for token and sequence classification. A speech model (`main_input_name` is
  `input_features`: Whisper, Speech2Text) gets random log-mel features in the layout its encoder requires
  instead of `input_ids` (`speech_features`). The self-checks of the passes and the
  exporter's sample inputs come from here.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.auto import modeling_auto

from turbotrain import hf_boundary
from turbotrain.batch_keys import IGNORE_INDEX  # the label Transformers' losses skip (named here for every pass)
from turbotrain.torch_boundary import TorchDispatchMode, op_arguments
from turbotrain.utils.mode import training_mode

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


def has_causal_attention(model: nn.Module) -> bool:
    """True when the model's attention layers are causal, whatever its head.

    Its layers' `is_causal` and `is_decoder` flags decide where they have them: causal if any says so, not
    if all say no. An encoder family's causal-LM head on a config without `is_decoder` (`BertLMHeadModel`,
    `BigBirdForCausalLM`: Transformers warns and keeps attention bidirectional) is not causal, though its
    loss still shifts the labels. Layers without flags (BLOOM, MPT: causal whatever the head) are asked
    by `attends_ahead`; where that cannot run, the config's `is_decoder`, else the causal-LM head."""
    inner = unwrap(model)
    flags = [
        flag
        for module in inner.modules()
        if module is not inner
        for flag in (getattr(module, "is_causal", None), getattr(module, "is_decoder", None))
        if isinstance(flag, bool)
    ]
    if flags:
        return any(flags)
    ahead = attends_ahead(inner)
    if ahead is not None:
        return not ahead
    return bool(getattr(inner.config, "is_decoder", False)) or is_causal_lm(inner)


def _base_outputs(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor] | None:
    """The base model's first output [1, T, ...] for each row of `ids` [N, T] (no grad, eval mode), or None
    if the base model cannot be run on `input_ids` (an encoder-decoder, a model of other inputs)."""
    inner = unwrap(model)
    base = getattr(inner, "base_model", inner)
    device = next(inner.parameters()).device
    try:
        with training_mode(inner, False), torch.no_grad():
            return [
                base(input_ids=row[None].to(device), attention_mask=mask[None].to(device))[0].float() for row in ids
            ]
    except Exception:
        return None


class _RandomOpRecorder(TorchDispatchMode):
    """Notes whether any ATen op that draws from a random generator runs (tagged `nondeterministic_seeded`:
    dropout's bernoulli, rand, exponential_, ...)."""

    def __init__(self):
        super().__init__()
        self.drew = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.drew = self.drew or (torch.Tag.nondeterministic_seeded in func.tags and _draws(func, args, kwargs))
        return func(*args, **kwargs)


def _draws(func, args: tuple, kwargs: dict) -> bool:
    """A seeded op draws unless its dropout probability (`p`, `dropout_p`: SDPA's kernels, native_dropout)
    is 0: SDPA in every model is a seeded op, called with dropout_p=0 where the model has no dropout."""
    for position, argument in enumerate(op_arguments(func)):
        if argument.name in ("p", "dropout_p"):
            value = args[position] if position < len(args) else kwargs.get(argument.name, argument.default_value)
            return value != 0
    return True


def draws_at_random(model: nn.Module, length: int = 6) -> bool | None:
    """Whether the base model draws random numbers in training mode: a training-mode forward and backward of a
    few tokens runs an op that draws from a random generator (dropout; PhiMoE's sampled expert routing, which
    draws whether or not the draw changes the result at this input). The gradient is taken with respect to
    the input embeddings only, so no parameter gradient is made or touched, and the caller's random streams
    are left as they were (forked). None if the base model cannot run this way."""
    inner = unwrap(model)
    base = getattr(inner, "base_model", inner)
    vocab, embedding = vocab_size(model), module_or_none(base, "get_input_embeddings")
    if vocab is None or embedding is None:
        return None
    device = next(inner.parameters()).device
    ids = (torch.arange(4, 4 + length) % vocab)[None].to(device)
    recorder = _RandomOpRecorder()
    try:
        with training_mode(inner, True), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            with recorder:
                with torch.no_grad():
                    embeds = embedding(ids)
                embeds.requires_grad_()
                output = base(inputs_embeds=embeds, attention_mask=torch.ones_like(ids))[0]
                torch.autograd.grad(output.float().square().mean(), embeds)
    except Exception:
        return None
    return recorder.drew


def outputs_differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two outputs of probe forwards differ beyond float noise (1e-6 of the first's largest value)."""
    return bool((a - b).abs().max().item() > 1e-6 * a.abs().max().item())


def attends_ahead(model: nn.Module, length: int = 6) -> bool | None:
    """Whether the base model's first output position changes when only the last token does (one tiny
    forward, [1, length] ids); None if the base model cannot be run on `input_ids`."""
    vocab = vocab_size(model)
    if vocab is None:
        return None
    ids = torch.arange(4, 4 + length).repeat(2, 1) % vocab  # [2, T]: the second row's last token differs
    ids[1, -1] = (ids[0, -1] + 1) % vocab
    outputs = _base_outputs(model, ids, torch.ones(length, dtype=torch.long))
    return None if outputs is None else outputs_differ(outputs[0][:, 0], outputs[1][:, 0])


def reads_masked_positions(model: nn.Module, length: int = 6, padding: int = 3) -> bool | None:
    """Whether the base model's outputs at real tokens change with the ids at positions the attention mask
    hides (ConvBERT's span convolutions mix neighbouring tokens outside attention); None if it cannot run."""
    vocab = vocab_size(model)
    if vocab is None:
        return None
    ids = torch.arange(4, 4 + length + padding).repeat(2, 1) % vocab  # [2, T]: other ids under the mask
    ids[1, length:] = (ids[0, length:] + 7) % vocab
    mask = (torch.arange(length + padding) < length).long()
    outputs = _base_outputs(model, ids, mask)
    return None if outputs is None else outputs_differ(outputs[0][:, :length], outputs[1][:, :length])


def position_offset(model: nn.Module) -> int:
    """RoBERTa-style embeddings count positions from padding_idx + 1; others from 0."""
    inner = unwrap(model)
    embeddings = getattr(getattr(inner, "base_model", inner), "embeddings", None)
    padding_idx = getattr(embeddings, "padding_idx", None)
    if hasattr(embeddings, "create_position_ids_from_input_ids") and isinstance(padding_idx, int):
        return padding_idx + 1
    return 0


SPAN_FIELDS = ("sliding_window", "local_attention", "attention_chunk_size", "attention_window")


def _text_config(model: nn.Module):
    config = unwrap(model).config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def attention_spans(model: nn.Module) -> list[int]:
    """Window and chunk sizes (tokens) the attention applies, sorted; those at or above the position limit
    (`max_position_embeddings`) never bind and are left out."""
    config = _text_config(model)
    limit = getattr(config, "max_position_embeddings", None) or float("inf")
    spans = set()
    for name in SPAN_FIELDS:
        for span in _config_values(config, name):
            if isinstance(span, int) and not isinstance(span, bool) and 0 < span < limit:
                spans.add(span)
    return sorted(spans)


def _config_values(config, name: str) -> list:
    """`config.<name>` as a flat list; a heterogeneous config (per-layer attributes, which refuse global reads)
    gives each layer's value."""
    try:
        values = [getattr(config, name, None)]
    except Exception:
        try:
            values = [getattr(layer, name, None) for layer in config.per_layer_config]
        except Exception:
            values = []
    return [item for value in values for item in (value if isinstance(value, (list, tuple)) else [value])]


def length_dependent_rope(model: nn.Module) -> tuple[str, int] | None:
    """The rotary rule whose frequencies follow the largest position in a batch, and its length limit."""
    config = _text_config(model)
    parameters = getattr(config, "rope_parameters", None) or {}
    tables = (
        parameters.values() if all(isinstance(v, dict) for v in parameters.values()) and parameters else [parameters]
    )
    for table in tables:
        kind = str(table.get("rope_type", table.get("type", "default")))
        if kind == "longrope":
            limit = table.get("original_max_position_embeddings") or getattr(
                config, "original_max_position_embeddings", None
            )
            return ("longrope", int(limit or getattr(config, "max_position_embeddings", 0)))
        if "dynamic" in kind:
            return ("dynamic", int(getattr(config, "max_position_embeddings", 0)))
    return None


def layer_types(model: nn.Module) -> list[str]:
    """The config's attention kind of each layer ("full_attention", "sliding_attention", ...), or []."""
    kinds = getattr(_text_config(model), "layer_types", None)
    return [str(kind) for kind in kinds] if isinstance(kinds, (list, tuple)) else []


def max_positions(model: nn.Module) -> int:
    """The longest sequence the model's position table allows (4096 where its config names no limit)."""
    config = unwrap(model).config
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 4096
    return int(positions) - position_offset(model)


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


def synthetic_batch(
    model: nn.Module, lengths: list[int], *, seed: int, ignore_every: int = 0, first_id: int = 4
) -> dict[str, torch.Tensor]:
    """A right-padded batch of `len(lengths)` rows with labels fitting the model's task, on its device.

    input_ids [B, T] in [first_id, vocab) (special ids below first_id stay out), pad where the
    attention mask is 0; labels: [B] classes for sequence classification, else [B, T] with -100 on
    padding and on every `ignore_every`-th position (0: none); token ids for language models, class
    ids for token classification. Drawn from a private generator seeded with `seed`.
    """
    generator = torch.Generator().manual_seed(seed)
    rows, length = len(lengths), max(lengths)
    vocab = vocab_size(model) or num_classes(model)  # a speech encoder-decoder's labels are its decoder's ids
    input_ids = torch.randint(first_id, max(vocab, first_id + 1), (rows, length), generator=generator)
    attention_mask = (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).long()
    input_ids[attention_mask == 0] = pad_token_id(model)
    task = task_of(model)
    if task == SEQUENCE_CLASSIFICATION:
        labels = torch.randint(0, num_classes(model), (rows,), generator=generator)
    else:
        labels = (
            input_ids.clone()
            if task != TOKEN_CLASSIFICATION
            else torch.randint(0, num_classes(model), (rows, length), generator=generator)
        )
        labels[attention_mask == 0] = IGNORE_INDEX
        if ignore_every:
            labels[:, ::ignore_every] = IGNORE_INDEX
    device = next(model.parameters()).device
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    if getattr(unwrap(model), "main_input_name", "input_ids") == "input_features":
        batch = {"input_features": speech_features(model, rows, generator), "labels": labels}
    return {name: tensor.to(device) for name, tensor in batch.items()}


def speech_features(model: nn.Module, rows: int, generator: torch.Generator) -> torch.Tensor:
    """Random log-mel features: [B, mel bins, 2 x max_source_positions] for a Whisper-style encoder (two
    convolution frames per encoder position, the length it requires), else [B, 32 frames, features per frame]
    (Speech2Text's `input_feat_per_channel` x `input_channels`, Wav2Vec2-BERT's and SeamlessM4T's
    `feature_projection_input_dim`); a layout this cannot tell raises ValueError (the self-check refuses)."""
    config = unwrap(model).config
    dtype = next(model.parameters()).dtype
    mel_bins, positions = getattr(config, "num_mel_bins", None), getattr(config, "max_source_positions", None)
    if isinstance(mel_bins, int) and isinstance(positions, int):
        return torch.randn(rows, mel_bins, 2 * positions, generator=generator).to(dtype)
    per_channel = getattr(config, "input_feat_per_channel", None)
    per_frame = per_channel * getattr(config, "input_channels", 1) if isinstance(per_channel, int) else None
    per_frame = per_frame or getattr(config, "feature_projection_input_dim", None)
    if not isinstance(per_frame, int):
        raise ValueError(f"no known input_features layout for {type(unwrap(model)).__name__}")
    return torch.randn(rows, 32, per_frame, generator=generator).to(dtype)
