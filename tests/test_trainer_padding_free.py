"""TurboTrainer packs padded training batches: same losses as stock dynamic padding, eval stays padded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import transformers
from packaging import version
from transformers import Trainer, TrainingArguments

from tests.tiny_models import make
from tests.trainer_helpers import (
    COMMON,
    RightPaddingCollator,
    assert_losses_close,
    train_losses,
    variable_length_dataset,
)
from turbotrain import TurboTrainer, TurboTrainingArguments
from turbotrain.boundaries import hf_boundary
from turbotrain.passes.padding_free.packing import SEQUENCE_STARTS
from turbotrain.passes.registry import TrainerFacts
from turbotrain.utils.batch_keys import PADDED_MASK


def run(trainer_class, args_class, family, task, tmp_path, dropout=False, **overrides):
    model = make(family, task=task, dropout=dropout)
    args = args_class(output_dir=str(tmp_path / trainer_class.__name__), **{**COMMON, **overrides})
    return trainer_class(
        model=model,
        args=args,
        train_dataset=variable_length_dataset(task=task),
        data_collator=RightPaddingCollator(model.config.pad_token_id or 0),
    )


@pytest.mark.parametrize("family,task", [("roberta", "lm"), ("gpt2", "lm"), ("bert", "cls"), ("distilbert", "cls")])
def test_golden_losses_packed_match_stock_dynamic_padding(family, task, tmp_path):
    stock = train_losses(run(Trainer, TrainingArguments, family, task, tmp_path))
    turbo = run(TurboTrainer, TurboTrainingArguments, family, task, tmp_path)
    assert "padding_free" in turbo.turbo_report.applied
    assert_losses_close(train_losses(turbo), stock)
    assert len(set(stock)) == len(stock)


@pytest.mark.parametrize(
    "facts, refused", [(TrainerFacts(), True), (TrainerFacts(False, packs_scored_calls=True), False)]
)
def test_a_release_counting_tokens_inline_keeps_collator_packed_batches_padded(monkeypatch, facts, refused):
    # Transformers < 5.3 counts num_input_tokens_seen in its loop on the batch it was handed: a batch the collator
    # packed would be counted packed; a trainer packing inside its calls (DPO...) hands Trainer padded batches
    from turbotrain.passes.padding_free import trainer_refusal

    monkeypatch.setattr(hf_boundary, "counts_input_tokens_by_hook", lambda: False)
    trainer = SimpleNamespace(args=SimpleNamespace(neftune_noise_alpha=None, include_num_input_tokens_seen="all"))
    reason = trainer_refusal(trainer, facts)
    assert (reason is not None and "counts the tokens inside its loop" in reason) == refused
    trainer.args.include_num_input_tokens_seen = "no"
    assert trainer_refusal(trainer, facts) is None


def iterable_run(trainer_class, args_class, tmp_path, **overrides):
    trainer = run(trainer_class, args_class, "llama", "lm", tmp_path, max_steps=5, **overrides)
    trainer.train_dataset = trainer.train_dataset.to_iterable_dataset()  # a streamed data set: accelerate dispatches
    return trainer


def test_an_iterable_datasets_dispatched_batches_stay_unpacked_said_and_train_as_stock(tmp_path, caplog):
    # accelerate concatenates and slices dispatched batches on their first dimension: packed ones failed to
    # concatenate ("You can't use batches of different size with `dispatch_batches=True`...")
    stock = train_losses(iterable_run(Trainer, TrainingArguments, tmp_path))
    turbo = iterable_run(TurboTrainer, TurboTrainingArguments, tmp_path)
    with caplog.at_level("WARNING", logger="turbotrain"):
        assert_losses_close(train_losses(turbo), stock, rtol=1e-5)
    assert "accelerate dispatches an IterableDataset's batches" in caplog.text
    assert "training batches as collated (accelerate dispatches them)" in turbo.turbo_summary()


def test_an_iterable_dataset_without_dispatching_is_packed(tmp_path):
    off = {"accelerator_config": {"dispatch_batches": False}}
    stock = train_losses(iterable_run(Trainer, TrainingArguments, tmp_path, **off))
    turbo = iterable_run(TurboTrainer, TurboTrainingArguments, tmp_path, **off)
    assert_losses_close(train_losses(turbo), stock, rtol=1e-5)
    assert "padding_free (attention: " in turbo.turbo_summary()  # packed calls ran through a kernel
    assert "as collated" not in turbo.turbo_summary()


@pytest.mark.parametrize("counted", ["all", "non_padding"])
def test_tokens_seen_and_total_flos_are_counted_as_stock_counts_them(counted, tmp_path):
    # Trainer counts `num_input_tokens_seen` and estimates `total_flos` on the main input: a packed batch holds
    # fewer positions (stock's "all" counted 112/224/372 tokens at the first three steps, packed rows 56/152/272)
    runs = [
        run(cls, args, "gpt2", "lm", tmp_path, include_num_input_tokens_seen=counted, max_steps=4)
        for cls, args in ((Trainer, TrainingArguments), (TurboTrainer, TurboTrainingArguments))
    ]
    for trainer in runs:
        trainer.train()
    if hf_boundary.counts_input_tokens_by_hook():  # 5.3 and later
        assert "padding_free" in runs[1].turbo_report.applied
    else:  # older releases count inline in the loop, on the batch as packed: padding-free steps aside
        assert "padding_free (include_num_input_tokens_seen=" in runs[1].turbo_summary()
    batch = next(iter(runs[1].get_train_dataloader()))
    if hf_boundary.counts_input_tokens_by_hook():  # the batches were packed: fewer positions than the padded mask's
        assert batch["input_ids"].numel() < batch[PADDED_MASK].numel()
    stock, turbo = ([e["num_input_tokens_seen"] for e in t.state.log_history if "loss" in e] for t in runs)
    assert turbo == stock and len(set(stock)) == 4
    assert runs[1].state.total_flos == runs[0].state.total_flos > 0


@pytest.mark.parametrize("attention,mask_dims", [("packed", 2), ("masks", 4)])
def test_training_batches_are_packed_and_eval_batches_are_not(tmp_path, attention, mask_dims):
    # packed attention: one row per batch ("auto"), segment metadata and no 4-D mask; masks: the block mask
    trainer = run(TurboTrainer, TurboTrainingArguments, "roberta", "lm", tmp_path, padding_free_attention=attention)
    train_batch = next(iter(trainer.get_train_dataloader()))
    assert SEQUENCE_STARTS in train_batch and "position_ids" in train_batch
    assert train_batch["attention_mask"].dim() == mask_dims and ("cu_seq_lens_q" in train_batch) == (
        attention == "packed"
    )
    assert train_batch["input_ids"].shape[0] == 1 or attention == "masks"
    eval_batch = next(iter(trainer.get_eval_dataloader(variable_length_dataset(n=8, seed=1))))
    assert eval_batch["attention_mask"].dim() == 2 and SEQUENCE_STARTS not in eval_batch


@pytest.mark.skipif(
    version.parse(transformers.__version__) < version.parse("5.24"),
    reason="Transformers before 5.24 cannot switch GPT-2's attention at run time: no packed attention, no budget rows",
)
@pytest.mark.parametrize("row_tokens", ["auto", "longest", "24"])
@pytest.mark.parametrize("family,task", [("gpt2", "lm"), ("bert", "cls"), ("llama", "lm")])
def test_rows_packed_to_a_token_budget_keep_stocks_losses(family, task, row_tokens, tmp_path):
    # rows longer than the longest sequence change nothing in the loss (token sums, num_items_in_batch from the
    # padded labels), nor in pooled classification
    stock = train_losses(run(Trainer, TrainingArguments, family, task, tmp_path))
    turbo = run(TurboTrainer, TurboTrainingArguments, family, task, tmp_path, padding_free_row_tokens=row_tokens)
    assert turbo.turbo_report.padding_free.spec.mask == "sequences"
    rows = [batch["input_ids"].shape[0] for batch in turbo.get_train_dataloader()]
    assert (max(rows) == 1) == (row_tokens == "auto")
    assert_losses_close(train_losses(turbo), stock)


def test_evaluate_returns_padded_full_logits(tmp_path):
    seen = {}
    trainer = run(TurboTrainer, TurboTrainingArguments, "roberta", "lm", tmp_path, max_steps=2)
    trainer.compute_metrics = lambda p: seen.setdefault("shape", p.predictions.shape) and {}
    trainer.train()
    eval_set = variable_length_dataset(n=4, seed=2, max_len=9)
    trainer.evaluate(eval_dataset=eval_set)
    assert seen["shape"][0] == 4 and seen["shape"][2] == trainer.model.config.vocab_size


def test_padding_free_can_be_turned_off(tmp_path):
    trainer = run(TurboTrainer, TurboTrainingArguments, "roberta", "lm", tmp_path, padding_free=False)
    assert "padding_free" not in trainer.turbo_report.applied
    assert next(iter(trainer.get_train_dataloader()))["attention_mask"].dim() == 2


@pytest.mark.parametrize("family,task", [("roberta", "lm"), ("bert", "cls")])
def test_with_dropout_batches_stay_padded_and_losses_equal_stock(family, task, tmp_path, caplog):
    """Packed rows would draw other dropout masks: by default a model with dropout trains padded, exactly as
    stock (as a stock script with default dropout expects), with a warning naming the opt-in."""
    stock = train_losses(run(Trainer, TrainingArguments, family, task, tmp_path, dropout=True))
    turbo = run(TurboTrainer, TurboTrainingArguments, family, task, tmp_path, dropout=True)
    assert "padding_free" not in turbo.turbo_report.applied
    assert "padding_free (refused for this model" in turbo.turbo_summary()
    assert_losses_close(train_losses(turbo), stock, rtol=1e-5)


def test_padding_free_with_dropout_packs_when_asked(tmp_path):
    trainer = run(
        TurboTrainer, TurboTrainingArguments, "roberta", "lm", tmp_path, dropout=True, padding_free_with_dropout=True
    )
    assert "padding_free" in trainer.turbo_report.applied
    assert SEQUENCE_STARTS in next(iter(trainer.get_train_dataloader()))


def test_neftune_keeps_batches_padded_so_its_noise_is_stocks(tmp_path):
    # NEFTune's noise: alpha / sqrt(L * d) uniform, drawn in the padded batch's shape: packing would change both
    stock = train_losses(run(Trainer, TrainingArguments, "gpt2", "lm", tmp_path, neftune_noise_alpha=5.0))
    turbo = run(TurboTrainer, TurboTrainingArguments, "gpt2", "lm", tmp_path, neftune_noise_alpha=5.0)
    assert not turbo.turbo_options.padding_free
    assert "padding_free (neftune_noise_alpha=5.0: NEFTune draws its noise" in turbo.turbo_summary()
    assert_losses_close(train_losses(turbo), stock, rtol=1e-6)
    plain = train_losses(run(Trainer, TrainingArguments, "gpt2", "lm", tmp_path))
    assert all(abs(a - b) > 1e-6 for a, b in zip(stock, plain))  # the noise changed the losses
