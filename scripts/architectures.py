"""Tiny models of any Transformers family, built generically from its config, and one stock-vs-turbo comparison.

Used by `scripts/architecture_sweep.py` (every text family in the task mappings) and
`tests/test_architectures.py` (a representative few). Nothing is downloaded: each model is built from
`AutoConfig.for_model(model_type)` with the usual size attributes shrunk (hidden 32, 2 layers, 4 heads,
2 kv heads, head_dim 8, FFN 64, vocabulary 1,000, 128 positions, 4 experts) and every dropout set to 0.
Every window and chunk option is set below the examples' lengths (3..24 tokens: sliding windows 4,
ModernBERT's local band 8, chunks 8, local windows 4), and a config whose `layer_types` mix kinds keeps
one layer of each of its first two kinds, so that the paths where layers differ run (a tiny config whose
windows outlast every sequence hid padding-free's sliding-window bug). Qwen2/Qwen3-style configs turn
their sliding window on (`use_sliding_window`, one full layer first).

`compare(model_type, task, steps)` trains the same weights on the same padded, variable-length batches
with stock `Trainer` and with `TurboTrainer` (eager backend, `TurboTrainingArguments` defaults) and
returns per-step losses, the largest first-step gradient difference and the largest final-parameter
difference, each relative to the tensor's largest stock value.
"""

from __future__ import annotations

import copy
import tempfile
from dataclasses import dataclass, field

import torch
import transformers
from transformers import AutoConfig, PrinterCallback, Trainer, TrainerCallback, TrainingArguments
from transformers.models.auto import modeling_auto

TASK_MAPPINGS = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "seq-cls": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "token-cls": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "qa": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "seq2seq-lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
}
VOCAB = 1000
NUM_LABELS = 3
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, POSITIONS = 32, 2, 4, 2, 8, 64, 128
MAX_PARAMETERS = 5_000_000  # a "tiny" model above this kept a size attribute this generic shrink does not know

LAYER_NAMES = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers")
FFN_NAMES = ("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner")
MOE_FFN_NAMES = ("ffn_hidden_size", "moe_intermediate_size", "shared_expert_intermediate_size")
SIZES = (  # (value, attribute names): an int attribute larger than value is set to value
    (HIDDEN, ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "embedding_size", "d_embed")),
    (LAYERS, (*LAYER_NAMES, "num_decoder_layers")),
    (HEADS, ("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads")),
    (KV_HEADS, ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num")),
    (HEAD_DIM, ("head_dim", "d_kv", "kv_channels", "qk_rope_head_dim", "v_head_dim", "qk_nope_head_dim", "rotary_dim")),
    (FFN, (*FFN_NAMES, *MOE_FFN_NAMES, "expert_intermediate_size")),
    (POSITIONS, ("max_position_embeddings", "n_positions", "max_positions", "n_ctx", "max_seq_len")),
    (VOCAB, ("vocab_size",)),
    (4, ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")),
    (2, ("num_experts_per_tok", "num_selected_experts", "moe_topk", "top_k")),
)
# window and chunk options, each set to this size where the default is larger (all below the 3..24-token examples)
WINDOWS = (("local_attention", 8), ("sliding_window", 4), ("attention_chunk_size", 8), ("window_size", 4))
SLIDING_ON = dict(use_sliding_window=True, max_window_layers=1)  # Qwen2-style configs: windows off by default
NON_TEXT_INPUTS = ("pixel_values", "input_features", "input_values", "bbox", "image", "audio")


@dataclass
class Outcome:
    """One comparison: per-step losses of each trainer, relative differences, and the passes turbo applied."""

    stock_losses: list[float] = field(default_factory=list)
    turbo_losses: list[float] = field(default_factory=list)
    loss_diff: float = 0.0
    grad_diff: float = 0.0
    param_diff: float = 0.0
    applied: list[str] = field(default_factory=list)
    worst: str = ""


class Skip(Exception):
    """The model cannot be built tiny, or needs inputs other than text."""


def class_for(model_type: str, task: str) -> type | None:
    name = getattr(modeling_auto, TASK_MAPPINGS[task]).get(model_type)
    return getattr(transformers, name, None) if name else None


def _shrink(config) -> None:
    for value, names in SIZES:
        for name in names:
            current = getattr(config, name, None)
            if isinstance(current, int) and not isinstance(current, bool) and current > value:
                setattr(config, name, value)
    for name, current in list(vars(config).items()):
        if isinstance(current, float) and ("dropout" in name or "pdrop" in name or name.endswith("_drop")):
            setattr(config, name, 0.0)
        if name == "layer_types" and isinstance(current, list):
            setattr(config, name, _layer_types(current, getattr(config, "num_hidden_layers", LAYERS)))
    for name, size in WINDOWS:
        current = getattr(config, name, None)
        if isinstance(current, int) and not isinstance(current, bool) and current > size:
            setattr(config, name, size)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id"):
        current = getattr(config, name, None)
        if isinstance(current, int) and current >= VOCAB:
            setattr(config, name, 1)
    if getattr(config, "pad_token_id", 0) is None:
        config.pad_token_id = 0
    if getattr(config, "is_encoder_decoder", False) and getattr(config, "decoder_start_token_id", None) is None:
        config.decoder_start_token_id = config.pad_token_id


def _layer_types(kinds: list, layers: int) -> list:
    """`layers` layer kinds: the first `layers` kinds, or one of each of the first distinct kinds if they mix."""
    distinct = list(dict.fromkeys(kinds))
    return distinct[:layers] + kinds[len(distinct[:layers]) : layers] if len(distinct) > 1 else kinds[:layers]


def tiny_config(model_type: str):
    """The family's default config, shrunk (its `text_config` too); raises Skip if it cannot be built."""
    try:
        config = AutoConfig.for_model(model_type)
        if hasattr(config, "use_sliding_window"):
            config = AutoConfig.for_model(model_type, **SLIDING_ON)
    except Exception as error:
        raise Skip(f"no config: {type(error).__name__}") from error
    try:
        _shrink(config)
        text = getattr(config, "text_config", None)
        if text is not None and text is not config:
            _shrink(text)
    except Exception as error:  # a per-layer (heterogeneous) config refuses global size attributes
        raise Skip(f"shrink failed: {type(error).__name__}") from error
    config.num_labels = NUM_LABELS
    config.classifier_dropout = 0.0  # heads that default to 0.1 when the config has none (GPT-2's, Llama's)
    return config


def build(model_type: str, task: str, seed: int = 0) -> torch.nn.Module:
    model_class = class_for(model_type, task)
    if model_class is None:
        raise Skip("class not in transformers")
    main_input = getattr(model_class, "main_input_name", "input_ids")
    if main_input != "input_ids":
        raise Skip(f"needs {main_input}")
    config = tiny_config(model_type)
    if task == "qa":
        config.num_labels = 2  # start and end logits
    torch.manual_seed(seed)
    try:
        model = model_class(config)
    except Exception as error:
        raise Skip(f"tiny build failed: {type(error).__name__}: {str(error)[:80]}") from error
    size = sum(p.numel() for p in model.parameters())
    if size > MAX_PARAMETERS:
        raise Skip(f"not tiny ({size / 1e6:.0f}M parameters)")
    return model


def examples(model: torch.nn.Module, task: str, count: int = 12, seed: int = 0) -> list[dict]:
    """Variable-length examples (lengths 3..24) with labels fitting `task`."""
    generator = torch.Generator().manual_seed(seed)
    vocab = min(VOCAB, model.get_input_embeddings().num_embeddings)
    rows = []
    for _ in range(count):
        length = int(torch.randint(3, 25, (1,), generator=generator))
        ids = torch.randint(4, vocab, (length,), generator=generator)
        row = {"input_ids": ids}
        if task in ("causal-lm", "seq2seq-lm"):
            target_length = int(torch.randint(2, 12, (1,), generator=generator)) if task == "seq2seq-lm" else length
            row["labels"] = (
                ids.clone() if task == "causal-lm" else torch.randint(4, vocab, (target_length,), generator=generator)
            )
        elif task == "masked-lm":
            labels = ids.clone()
            labels[torch.rand(length, generator=generator) > 0.3] = -100
            labels[0] = ids[0]
            row["labels"] = labels
        elif task == "token-cls":
            row["labels"] = torch.randint(0, NUM_LABELS, (length,), generator=generator)
        elif task == "seq-cls":
            row["labels"] = torch.randint(0, NUM_LABELS, (), generator=generator)
        elif task == "qa":
            start = int(torch.randint(0, length, (1,), generator=generator))
            row["start_positions"] = torch.tensor(start)
            row["end_positions"] = torch.tensor(min(length - 1, start + 2))
        rows.append(row)
    return rows


class PadCollator:
    """Right-pads `input_ids` with the pad id (attention mask 0) and per-token labels with -100."""

    def __init__(self, pad_token_id: int):
        self.pad = pad_token_id

    def __call__(self, features: list[dict]) -> dict:
        batch = {}
        for key in features[0]:
            values = [f[key] for f in features]
            if values[0].dim() == 0:
                batch[key] = torch.stack(values)
                continue
            fill = self.pad if key == "input_ids" else -100
            batch[key] = torch.nn.utils.rnn.pad_sequence(values, batch_first=True, padding_value=fill)
            if key == "input_ids":
                lengths = torch.tensor([len(v) for v in values])
                batch["attention_mask"] = (torch.arange(batch[key].shape[1])[None] < lengths[:, None]).long()
        return batch


class _Recorder(TrainerCallback):
    """Per-step losses (from the model's outputs) and the first step's gradients."""

    def __init__(self):
        self.grads: dict[str, torch.Tensor] | None = None
        self.model = None

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if self.grads is None and model is not None:
            self.grads = {
                n: p.grad.detach().to_dense().clone() for n, p in model.named_parameters() if p.grad is not None
            }


def _train(trainer_class, args_class, model, task: str, steps: int, output_dir: str, **extra):
    losses: list[float] = []
    args = args_class(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        max_steps=steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        learning_rate=1e-3,
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        use_cpu=True,
        **extra,
    )
    pad = getattr(model.config, "pad_token_id", None)
    recorder = _Recorder()
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=examples(model, task),
        data_collator=PadCollator(pad if isinstance(pad, int) else 0),
        callbacks=[recorder],
    )
    trainer.remove_callback(PrinterCallback)
    handle = model.register_forward_hook(lambda m, a, out: losses.append(float(out.loss)) if m.training else None)
    try:
        trainer.train()
    finally:
        handle.remove()
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return trainer, losses, recorder.grads or {}, params


def _relative(a: dict, b: dict) -> tuple[float, str]:
    """Largest |b - a| over tensors, each relative to max(its largest |a|, 1% of the largest |a| anywhere):
    a tensor whose stock values are all float noise (a key bias's gradient, zero in exact arithmetic) is
    judged against the model's scale, not its own noise."""
    if a.keys() != b.keys():
        return float("inf"), f"{sorted(set(a) ^ set(b))[:2]} only in one"
    overall = max((t.abs().max().item() for t in a.values() if t.numel()), default=0.0)
    worst, where = 0.0, ""
    for name, ref in a.items():
        if not ref.numel():
            continue
        scale = max(ref.abs().max().item(), 1e-2 * overall) or 1.0
        diff = (b[name].float() - ref.float()).abs().max().item() / scale
        if not diff <= worst:
            worst, where = diff, name
    return worst, where


def compare(model_type: str, task: str, steps: int = 3) -> Outcome:
    """Stock Trainer and TurboTrainer from the same weights on the same batches. Raises Skip, or the crash
    (wrapped as StockCrash for the stock trainer)."""
    from turbotrain import TurboTrainer, TurboTrainingArguments

    model = build(model_type, task)
    turbo_model = copy.deepcopy(model)
    outcome = Outcome()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            _, stock_losses, stock_grads, stock_params = _train(Trainer, TrainingArguments, model, task, steps, tmp)
        except Exception as error:
            raise StockCrash(f"{type(error).__name__}: {error}") from error
        trainer, turbo_losses, turbo_grads, turbo_params = _train(
            TurboTrainer, TurboTrainingArguments, turbo_model, task, steps, tmp, backend="eager"
        )
    outcome.stock_losses, outcome.turbo_losses = stock_losses, turbo_losses
    outcome.applied = list(trainer.turbo_report.applied) if trainer.turbo_report is not None else []
    if len(stock_losses) != len(turbo_losses):
        outcome.loss_diff = float("inf")
    else:
        outcome.loss_diff = max(
            (abs(a - b) / max(abs(a), 1e-12) for a, b in zip(stock_losses, turbo_losses)), default=0.0
        )
    outcome.grad_diff, grad_where = _relative(stock_grads, turbo_grads)
    # a parameter whose gradient is float noise (zero in exact arithmetic: key biases, QA logit biases, a key
    # layer norm's bias) differs between the runs at its own scale; AdamW divides by sqrt(v), turning that noise
    # into +-lr steps in either run: left out of the parameter comparison (its gradient is compared above)
    noise = {
        n
        for n, g in stock_grads.items()
        if n in turbo_grads and g.numel() and (turbo_grads[n] - g).abs().max() > 1e-3 * g.abs().max()
    }
    outcome.param_diff, param_where = _relative(
        {n: p for n, p in stock_params.items() if n not in noise},
        {n: p for n, p in turbo_params.items() if n not in noise},
    )
    outcome.worst = grad_where if outcome.grad_diff >= outcome.param_diff else param_where
    return outcome


class StockCrash(Exception):
    """Stock Trainer itself failed on this model: not turbotrain's to fix."""
