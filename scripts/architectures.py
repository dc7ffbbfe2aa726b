"""Tiny models of any Transformers family, built generically from its config, and one stock-vs-turbo comparison.

Used by `scripts/architecture_sweep.py` (every family of every task mapping), `scripts/all_mappings.py` and
`tests/test_architectures.py` (a representative few). Nothing is downloaded: each model is built from
`AutoConfig.for_model(model_type)` shrunk by `scripts/tiny_configs.py` (hidden 32, 2 layers, 4 heads,
2 kv heads, head_dim 8, FFN 64, vocabulary 1,000, 128 positions, 4 experts, 32 x 32 images) with every
dropout set to 0, every window and chunk option below the text examples' lengths. Text tasks get padded token batches (below); media tasks (images, video, audio, CLIP-style
pairs, detection targets) get `scripts/task_inputs.py`'s examples and collator.

`compare(model_type, task, steps)` trains the same weights on the same batches with stock `Trainer` and with
`TurboTrainer` (eager backend, `TurboTrainingArguments` defaults) and returns per-step losses, the largest
first-step gradient difference and the largest final-parameter difference, each relative to the tensor's
largest stock value. A media family whose clamped config cannot run stock is tried once more with its sizes
halved instead (`tiny_configs.tiny_config(halve=True)`).
"""

from __future__ import annotations

import copy
import tempfile
from dataclasses import dataclass, field

import torch
import transformers
from scripts.tiny_configs import NUM_LABELS, VOCAB, Skip, tiny_config
from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments
from transformers.models.auto import modeling_auto

from scripts import task_inputs

TEXT_TASKS = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "seq-cls": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "token-cls": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "qa": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "seq2seq-lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
}
TASK_MAPPINGS = {**TEXT_TASKS, **task_inputs.MEDIA_TASKS}
MAX_PARAMETERS = 5_000_000  # a "tiny" model above this kept a size attribute this generic shrink does not know


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


def class_for(model_type: str, task: str) -> type | None:
    name = getattr(modeling_auto, TASK_MAPPINGS[task]).get(model_type)
    name = name[0] if isinstance(name, (tuple, list)) else name  # DeiT: (the classifier, its with-teacher twin)
    return getattr(transformers, name, None) if name else None


def build(model_type: str, task: str, seed: int = 0, halve: bool = False) -> torch.nn.Module:
    model_class = class_for(model_type, task)
    if model_class is None:
        raise Skip("class not in transformers")
    main_input = getattr(model_class, "main_input_name", "input_ids")
    if main_input != "input_ids" and task in TEXT_TASKS:
        raise Skip(f"needs {main_input}")
    return build_class(model_class, model_type, seed, num_labels=2 if task == "qa" else None, halve=halve)


def build_class(
    model_class: type,
    model_type: str,
    seed: int = 0,
    num_labels: int | None = None,
    halve: bool = False,
    max_parameters: int = MAX_PARAMETERS,
) -> torch.nn.Module:
    """`model_class` on the tiny config of `model_type` (sizes clamped; if that cannot build, or `halve`, halved)."""
    for halving in (False, True) if not halve else (True,):
        config = tiny_config(model_type, halve=halving)
        if num_labels is not None:
            config.num_labels = num_labels  # QA: start and end logits
        torch.manual_seed(seed)
        try:
            model = model_class(config)
            break
        except Exception as error:
            if halving:
                raise Skip(f"tiny build failed: {type(error).__name__}: {str(error)[:80]}") from error
    size = sum(p.numel() for p in model.parameters())
    if size > max_parameters:
        raise Skip(f"not tiny ({size / 1e6:.0f}M parameters)")
    return model


def examples(model: torch.nn.Module, task: str, count: int = 12, seed: int = 0) -> list[dict]:
    """Variable-length examples (lengths 3..24) with labels fitting `task` (media tasks: task_inputs.py)."""
    if task in task_inputs.MEDIA_TASKS:
        return task_inputs.examples(model, task, count, seed)
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
    pad = pad if isinstance(pad, int) else 0
    recorder = _Recorder()
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=examples(model, task),
        data_collator=task_inputs.MediaCollator(pad) if task in task_inputs.MEDIA_TASKS else PadCollator(pad),
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
    (wrapped as StockCrash for the stock trainer). A media family whose clamped config builds but cannot run
    stock (Swin's 3 heads on a width of 32) is tried again with its sizes halved (tiny_configs.py)."""
    try:
        return _compare(model_type, task, steps, halve=False)
    except StockCrash as crash:
        if task not in task_inputs.MEDIA_TASKS:
            raise
        try:
            return _compare(model_type, task, steps, halve=True)
        except (Skip, StockCrash):
            raise crash from None


def _compare(model_type: str, task: str, steps: int, halve: bool) -> Outcome:
    from turbotrain import TurboTrainer, TurboTrainingArguments

    model = build(model_type, task, halve=halve)
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
