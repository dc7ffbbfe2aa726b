"""Token-budget batches: full use of the budget, every example once per epoch, rank-aware."""

from __future__ import annotations

import pytest

from tests.tiny_models import make
from tests.trainer_helpers import COMMON, RightPaddingCollator, variable_length_dataset
from turbotrain import TurboTrainer, TurboTrainingArguments
from turbotrain.training import token_budget
from turbotrain.training.token_budget import TokenBudgetBatchSampler, plan_batches

SUPPORTED = token_budget.BatchRebalanceSampler is not object
needs_batch_sampler = pytest.mark.skipif(not SUPPORTED, reason="Transformers < 5.17 has no BatchRebalanceSampler")
LENGTHS = [5, 9, 3, 12, 1, 7, 30, 2, 2, 8]


def test_plan_batches_respects_the_budget_and_keeps_order():
    batches = plan_batches(list(range(len(LENGTHS))), LENGTHS, max_tokens=16)
    assert [i for batch in batches for i in batch] == list(range(len(LENGTHS)))
    for batch in batches:
        assert sum(LENGTHS[i] for i in batch) <= 16 or len(batch) == 1  # an over-long example goes alone
    assert [6] in batches  # the 30-token example


@needs_batch_sampler
def test_every_example_once_per_epoch_and_a_new_order_each_epoch():
    sampler = TokenBudgetBatchSampler(LENGTHS, max_tokens=16, seed=3)
    first = [i for batch in sampler for i in batch]
    sampler.set_epoch(1)
    second = [i for batch in sampler for i in batch]
    assert sorted(first) == sorted(second) == list(range(len(LENGTHS)))
    assert first != second and len(sampler) == len(list(iter(sampler)))


@needs_batch_sampler
def test_ranks_split_the_batches_evenly():
    ranks = [TokenBudgetBatchSampler(LENGTHS, max_tokens=10, seed=0, rank=r, world_size=2) for r in range(2)]
    batches = [list(sampler) for sampler in ranks]
    assert len(batches[0]) == len(batches[1])
    seen = [i for rank in batches for batch in rank for i in batch]
    assert len(seen) == len(set(seen))


def test_bad_budget_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="positive"):
        TurboTrainingArguments(output_dir=str(tmp_path), report_to="none", max_tokens_per_batch=0)


@needs_batch_sampler
def test_trainer_batches_fill_the_token_budget(tmp_path):
    dataset = variable_length_dataset(n=40)
    args = TurboTrainingArguments(
        output_dir=str(tmp_path), **{**COMMON, "max_steps": 3}, max_tokens_per_batch=64, padding_free=False
    )
    trainer = TurboTrainer(
        model=make("roberta", dropout=False), args=args, train_dataset=dataset, data_collator=RightPaddingCollator(1)
    )
    sizes = []
    for batch in trainer.get_train_dataloader():
        real = int(batch["attention_mask"].sum())
        assert real <= 64 or batch["input_ids"].shape[0] == 1
        sizes.append(batch["input_ids"].shape[0])
    assert sum(sizes) == len(dataset) and len(set(sizes)) > 1  # every example once, batch sizes vary
    trainer.train()
    assert trainer.state.global_step == 3


@pytest.mark.skipif(SUPPORTED, reason="this Transformers release supports token-budget batches")
def test_older_transformers_are_refused_with_the_version_needed(tmp_path):
    with pytest.raises(ValueError, match=r"max_tokens_per_batch needs transformers>=5\.17"):
        TurboTrainingArguments(output_dir=str(tmp_path), report_to="none", max_tokens_per_batch=64)


@needs_batch_sampler
def test_an_iterable_dataset_is_refused_before_training(tmp_path):
    # Trainer draws no sampler for an IterableDataset: the budget went unused, batches of 4 trained silently
    args = TurboTrainingArguments(output_dir=str(tmp_path), **{**COMMON, "max_steps": 3}, max_tokens_per_batch=64)
    stream = variable_length_dataset(n=40).to_iterable_dataset()
    trainer = TurboTrainer(
        model=make("roberta", dropout=False), args=args, train_dataset=stream, data_collator=RightPaddingCollator(1)
    )
    with pytest.raises(ValueError, match="max_tokens_per_batch .* an IterableDataset \\(IterableDataset\\) has none"):
        trainer.train()
    assert trainer.state.global_step == 0
