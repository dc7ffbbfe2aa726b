"""Bad input a user meets, each named by turbotrain in one line before any optimizer step, and never worse than
stock Trainer (docs/reliability.md, "Bad input"; batch_checks.py, checkpoints.py). Tiny models, two steps at most."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import Trainer, TrainingArguments

from tests.tiny_models import CLASSES, CONFIGS, VOCAB, llm, make
from tests.trainer_helpers import COMMON, RightPaddingCollator, stock_trainer, train_losses, turbo_trainer
from turbotrain import TurboTrainer, TurboTrainingArguments, modeling
from turbotrain.training import batch_checks, checkpoints

LIMIT = 64
PAD = {"roberta": 1}  # the families' pad token ids (0 elsewhere)


def short_model(family: str, task: str = "lm"):
    """A tiny model of `family` whose position table holds LIMIT tokens (RoBERTa's 66 rows: padding_idx 1 + 1)."""
    config_class, sizes, no_dropout = CONFIGS[family]
    key = "n_positions" if family == "gpt2" else "max_position_embeddings"
    sizes = {**sizes, key: LIMIT + (2 if family == "roberta" else 0)}
    torch.manual_seed(0)
    return CLASSES[task][family](config_class(vocab_size=VOCAB, **sizes, **no_dropout))


def rows(lengths: list[int], labels=None, token: int = 5) -> Dataset:
    """Rows of `lengths` tokens, labelled with their own ids unless `labels` (one per row) is given."""
    ids = [[token] * n for n in lengths]
    return Dataset.from_dict({"input_ids": ids, "labels": labels if labels is not None else ids})


def run(trainer_of, family: str, tmp_path, model, dataset: Dataset, **options):
    """A two-step run with right padding; returns (trainer, the error it raised or None, whether weights moved)."""
    trainer = trainer_of(family, tmp_path, model=model, train_dataset=dataset, max_steps=2, **options)
    trainer.data_collator = RightPaddingCollator(pad_token_id=PAD.get(family, 0))
    before = [p.detach().clone() for p in model.parameters()]
    try:
        trainer.train()
        error = None
    except Exception as raised:  # what each trainer raises is what the tests compare
        error = raised
    moved = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    return trainer, error, moved


# --- rows longer than the position table ----------------------------------------------------------------


@pytest.mark.parametrize(
    "build,limit",
    [
        (lambda: short_model("bert"), LIMIT),
        (lambda: short_model("roberta"), LIMIT),  # 66 rows less padding_idx + 1
        (lambda: short_model("gpt2"), LIMIT),  # n_positions
        (lambda: make("llama"), None),  # rotary: no table
        (lambda: llm(vocab=VOCAB), None),  # Qwen2
    ],
    ids=["bert", "roberta", "gpt2", "llama", "qwen2"],
)
def test_position_limit_is_the_learned_tables_and_none_for_rotary_positions(build, limit):
    assert modeling.position_limit(build()) == limit


@pytest.mark.parametrize("padding_free", [True, False], ids=["padding_free", "padded"])
@pytest.mark.parametrize("family", ["bert", "roberta", "gpt2"])
def test_a_200_token_row_on_a_64_position_model_raises_one_message_naming_200_and_64_before_any_optimizer_step(
    tmp_path, family, padding_free
):
    model = short_model(family)
    trainer, error, moved = run(
        turbo_trainer, family, tmp_path, model, rows([200, 20, 30, 10]), padding_free=padding_free
    )
    assert ("padding_free" in trainer.turbo_report.applied) == padding_free
    assert isinstance(error, ValueError), error
    message = str(error)
    assert "\n" not in message and "200 tokens" in message and "at most 64" in message
    assert "truncation=True, max_length=64" in message
    assert trainer.state.global_step == 0 and not moved


@pytest.mark.parametrize("family", ["bert", "roberta", "gpt2"])
def test_stock_meets_the_same_row_inside_the_model_and_says_not_what_to_do(tmp_path, family):
    model = short_model(family)
    trainer, error, moved = run(stock_trainer, family, tmp_path, model, rows([200, 20, 30, 10]))
    assert isinstance(error, (RuntimeError, IndexError)) and "max_length" not in str(error)
    assert trainer.state.global_step == 0 and not moved


@pytest.mark.parametrize("family", ["bert", "roberta", "gpt2"])
def test_rows_that_fit_are_never_refused(family):
    """The limit's own length passes, and so does a batch padded past it whose real rows fit (stock trains RoBERTa's:
    it numbers positions from the ids)."""
    limits = batch_checks.limits_of(short_model(family), own_loss=True)
    ids = torch.full((2, LIMIT + 2), 5)
    mask = torch.ones_like(ids)
    mask[:, LIMIT:] = 0
    assert batch_checks.problem({"input_ids": ids[:, :LIMIT], "labels": ids[:, :LIMIT]}, limits) is None
    assert batch_checks.problem({"input_ids": ids, "attention_mask": mask, "labels": ids}, limits) is None
    packed = {"input_ids": torch.full((1, 3 * LIMIT), 5), "position_ids": torch.arange(LIMIT).repeat(1, 3)}
    assert batch_checks.problem(packed, limits) is None  # TRL's packed rows: positions restart per sequence


def test_rotary_models_take_rows_past_their_config_length():
    limits = batch_checks.limits_of(make("llama"), own_loss=True)  # max_position_embeddings=128
    assert batch_checks.problem({"input_ids": torch.full((1, 300), 5)}, limits) is None


# --- empty rows and rows of padding -----------------------------------------------------------------------


def test_a_batch_of_empty_rows_is_named_where_stock_fails_in_attention(tmp_path):
    dataset = rows([0, 0, 0, 0])
    _, stock_error, _ = run(stock_trainer, "bert", tmp_path, make("bert", dropout=False), dataset)
    trainer, error, moved = run(turbo_trainer, "bert", tmp_path, make("bert", dropout=False), dataset)
    assert "reshape" in str(stock_error)
    assert isinstance(error, ValueError) and "no tokens" in str(error) and "filter" in str(error)
    assert trainer.state.global_step == 0 and not moved


class PaddingOnly(RightPaddingCollator):
    """Rows of token 4 become rows of padding only (attention mask 0, labels -100), as a bad pre-processing makes."""

    def __call__(self, features):
        batch = super().__call__(features)
        padding = (batch["input_ids"] == 4).any(-1)
        batch["attention_mask"][padding] = 0
        batch["labels"][padding] = -100
        return batch


@pytest.mark.parametrize("real", [[6] * 3, [4] * 3], ids=["some_rows", "whole_batch"])
def test_empty_rows_and_rows_of_only_padding_train_as_stock_with_padding_free(tmp_path, real):
    """Stock trains them (a row of loss 0); packing failed on them (a causal LM's label dropped past the row)."""
    ids = [[4] * 5, [], real, [4] * 7]
    losses = []
    for trainer_of in (stock_trainer, turbo_trainer):
        model = make("llama", dropout=False)
        dataset = Dataset.from_dict({"input_ids": ids, "labels": ids})
        trainer = trainer_of("llama", tmp_path, model=model, train_dataset=dataset, max_steps=2)
        trainer.data_collator = PaddingOnly()
        losses.append(train_losses(trainer))
    assert "padding_free" in trainer.turbo_report.applied
    assert losses[1] == losses[0] and len(losses[0]) == 2


# --- ids and labels out of range, labels of another length, NaN ---------------------------------------------


def test_token_ids_past_the_vocabulary_are_named_as_a_tokenizer_mismatch(tmp_path):
    dataset = rows([4, 5, 7, 3])
    dataset = Dataset.from_dict({"input_ids": [[5] * 4, [300] * 5, [5] * 7, [5] * 3], "labels": dataset["labels"]})
    _, stock_error, _ = run(stock_trainer, "bert", tmp_path, make("bert", dropout=False), dataset)
    trainer, error, moved = run(turbo_trainer, "bert", tmp_path, make("bert", dropout=False), dataset)
    assert "index out of range" in str(stock_error) and "97" not in str(stock_error)
    message = str(error)
    assert isinstance(error, ValueError) and "token id 300" in message and "vocabulary of 97" in message
    assert "resize_token_embeddings" in message and trainer.state.global_step == 0 and not moved


@pytest.mark.parametrize(
    "task,labels,named",
    [
        ("lm", [[5] * 4, [500] * 5, [5] * 7, [5] * 3], "label 500 is outside BertForMaskedLM's vocabulary of 97"),
        ("cls", [0, 1, 7, 2], "label 7 is outside BertForSequenceClassification's 3 classes (num_labels=3"),
        ("tok", [[0] * 4, [1] * 5, [7] * 7, [2] * 3], "label 7 is outside BertForTokenClassification's 3 classes"),
    ],
)
def test_labels_outside_the_vocabulary_or_the_classes_are_named(tmp_path, task, labels, named):
    dataset = rows([4, 5, 7, 3], labels=labels)
    _, stock_error, _ = run(stock_trainer, "bert", tmp_path, make("bert", task=task, dropout=False), dataset)
    model = make("bert", task=task, dropout=False)
    trainer, error, moved = run(turbo_trainer, "bert", tmp_path, model, dataset)
    assert "out of bounds" in str(stock_error) and "num_labels" not in str(stock_error)
    assert isinstance(error, ValueError) and named in str(error) and "-100" in str(error)
    assert trainer.state.global_step == 0 and not moved


class LabelsOneShort(RightPaddingCollator):
    def __call__(self, features):
        batch = super().__call__(features)
        batch["labels"] = batch["labels"][:, :-1]
        return batch


@pytest.mark.parametrize("padding_free", [True, False], ids=["padding_free", "padded"])
def test_labels_of_another_length_than_input_ids_are_named(tmp_path, padding_free):
    """Stock fails in the loss; turbotrain blamed label sparsity's head, and padding-free trained on them silently."""
    model = make("bert", dropout=False)
    trainer = turbo_trainer("bert", tmp_path, model=model, train_dataset=rows([4, 5, 7, 3]), padding_free=padding_free)
    trainer.data_collator = LabelsOneShort()
    with pytest.raises(ValueError, match=r"labels are \[4, 6\] but input_ids are \[4, 7\]: each token needs one"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_nan_in_float_inputs_is_named_where_stock_trains_to_nan_weights(tmp_path):
    dataset = rows([4, 5, 7, 3], labels=[0.5, float("nan"), 1.0, 2.0])
    stock_model = make("bert", task="cls", dropout=False, num_labels=1)  # regression: float labels
    _, stock_error, _ = run(stock_trainer, "bert", tmp_path, stock_model, dataset)
    assert stock_error is None and any(p.isnan().any() for p in stock_model.parameters())
    model = make("bert", task="cls", dropout=False, num_labels=1)
    trainer, error, moved = run(turbo_trainer, "bert", tmp_path, model, dataset)
    assert isinstance(error, ValueError) and "'labels' holds NaN" in str(error)
    assert trainer.state.global_step == 0 and not moved


def test_nan_labels_are_left_to_a_custom_loss():
    """A custom loss may mask NaN labels (several regression targets, some missing): only the inputs are checked."""
    limits = batch_checks.limits_of(make("bert", task="cls", num_labels=1), own_loss=False)
    batch = {"input_ids": torch.full((2, 3), 5), "labels": torch.tensor([1.0, float("nan")])}
    assert batch_checks.problem(batch, limits) is None
    batch["inputs_embeds"] = torch.tensor([[float("nan")]])
    assert "'inputs_embeds' holds NaN" in batch_checks.problem(batch, limits)


# --- options, output folder, disk ----------------------------------------------------------------------------


def test_a_misspelt_option_names_itself_as_stock_names_its_own():
    with pytest.raises(TypeError, match="unexpected keyword argument 'pading_free'"):
        TurboTrainingArguments(output_dir="unused", pading_free=True)


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder no file can be created in: read-only for a user; for root (whom modes do not stop), sysfs."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o500)
        return folder
    folder = Path("/sys/kernel")
    if not folder.is_dir() or os.access(folder, os.W_OK) and _creates(folder):
        pytest.skip("no folder here refuses root's writes")
    return folder


def _creates(folder: Path) -> bool:
    try:
        (folder / ".turbotrain-probe").touch()
    except OSError:
        return False
    (folder / ".turbotrain-probe").unlink()
    return True


def writing_to(folder: Path, turbo: bool):
    """`stock_trainer` or `turbo_trainer`, writing into `folder`."""

    def trainer_of(family, tmp_path, model, train_dataset, **overrides):
        arguments, trainer = (TurboTrainingArguments, TurboTrainer) if turbo else (TrainingArguments, Trainer)
        args = arguments(output_dir=str(folder), **{**COMMON, **overrides})
        return trainer(model=model, args=args, train_dataset=train_dataset)

    return trainer_of


def test_an_output_dir_that_cannot_be_written_is_refused_before_the_first_step(tmp_path):
    folder, data, saving = unwritable_folder(tmp_path), rows([4, 5]), dict(save_strategy="steps", save_steps=1)
    stock, stock_error, _ = run(
        writing_to(folder, False), "bert", tmp_path, make("bert", dropout=False), data, **saving
    )
    assert isinstance(stock_error, PermissionError) and stock.state.global_step == 1  # found at its first save
    trainer, error, moved = run(writing_to(folder, True), "bert", tmp_path, make("bert", dropout=False), data, **saving)
    assert isinstance(error, PermissionError) and f"output_dir {folder} is not writable" in str(error)
    assert trainer.state.global_step == 0 and not moved
    _, error, _ = run(writing_to(folder, True), "bert", tmp_path, make("bert", dropout=False), data, save_strategy="no")
    assert error is None  # a run that never saves is not refused: stock trains it too


def test_a_full_disk_during_a_save_is_named_and_the_checkpoint_left_cut_off(tmp_path, monkeypatch):
    import safetensors.torch

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr(safetensors.torch, "save_file", full)
    saving = dict(save_strategy="steps", save_steps=1)
    _, stock_error, _ = run(stock_trainer, "bert", tmp_path, make("bert", dropout=False), rows([4, 5]), **saving)
    trainer, error, _ = run(turbo_trainer, "bert", tmp_path, make("bert", dropout=False), rows([4, 5]), **saving)
    assert stock_error.errno == errno.ENOSPC and "resume" not in str(stock_error)
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert "while saving" in str(error) and "resume_from_checkpoint=True" in str(error)
    cut_off = Path(trainer.args.output_dir) / "checkpoint-1"
    assert checkpoints.CUT_OFF in checkpoints.problem(cut_off)  # resume sets it aside
