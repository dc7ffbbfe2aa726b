"""Token-budget batches: as many examples per batch as fit in `max_tokens` (an alternative to a fixed
batch size, for padding-free training where a batch costs its real tokens).

Per epoch the examples are shuffled (seed + epoch), then taken in that order into a batch until the
next one would push the sum of lengths past `max_tokens`; an example longer than the budget makes a
batch of its own. With several data-parallel ranks, batch i goes to rank i mod world_size, and the
epoch is cut to a multiple of world_size so every rank takes the same number of steps.

Not an exact rewrite: it changes which examples share a step (that is its purpose). The number of
batches can differ by a few between epochs; Trainer sizes an epoch from the first one.

It subclasses Transformers' `BatchRebalanceSampler` only to be handed to the DataLoader as a
rank-aware `batch_sampler` (Trainer's documented route for per-rank variable-size batches). That class
came in Transformers 5.17; on older releases `max_tokens_per_batch` is refused with that reason
(`require_support`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import trainer_pt_utils

MINIMUM_TRANSFORMERS = "5.17"
BatchRebalanceSampler = getattr(trainer_pt_utils, "BatchRebalanceSampler", object)


def require_support() -> None:
    """Raise a clear error where Trainer cannot take a per-rank batch sampler (Transformers < 5.17)."""
    if BatchRebalanceSampler is object:
        raise ValueError(
            f"max_tokens_per_batch needs transformers>={MINIMUM_TRANSFORMERS} (its "
            "BatchRebalanceSampler); upgrade transformers or leave max_tokens_per_batch unset"
        )


@dataclass(frozen=True)
class TokenBudgetOptions:
    """The token budget's option, a field of `TurboOptions` (args.py), checked once there (`check`)."""

    max_tokens_per_batch: int | None = field(
        default=None,
        metadata={
            "help": "Fill each training batch with examples up to this many tokens, instead of "
            "per_device_train_batch_size examples (token_budget.py; pairs well with padding_free)."
        },
    )

    @classmethod
    def check(cls, values) -> None:
        budget = values.max_tokens_per_batch
        if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 1):
            raise ValueError(f"max_tokens_per_batch must be a positive whole number of tokens, got {budget!r}")
        if budget is not None:
            require_support()


def require_map_style(dataset) -> None:
    """Raise a clear error for a dataset without a sampler to replace: Trainer streams an IterableDataset's
    examples as they come, and a budget left unused would silently train on other batches than asked for."""
    if isinstance(dataset, torch.utils.data.IterableDataset):
        raise ValueError(
            "max_tokens_per_batch fills each batch by example length through a batch sampler, and an "
            f"IterableDataset ({type(dataset).__name__}) has none: leave max_tokens_per_batch unset, or train on a "
            "map-style dataset (datasets: Dataset.from_generator, or load without streaming=True)"
        )


def example_lengths(dataset, key: str = "input_ids") -> list[int]:
    """Token length of every example: a `length` column if the dataset has one, else len(example[key])."""
    columns = getattr(dataset, "column_names", None) or []
    if "length" in columns:
        return [int(n) for n in dataset["length"]]
    if key in columns:
        return [len(ids) for ids in dataset[key]]
    return [len(dataset[i][key]) for i in range(len(dataset))]


def plan_batches(order: list[int], lengths: list[int], max_tokens: int) -> list[list[int]]:
    batches, current, used = [], [], 0
    for index in order:
        length = lengths[index]
        if current and used + length > max_tokens:
            batches.append(current)
            current, used = [], 0
        current.append(index)
        used += length
    if current:
        batches.append(current)
    return batches


class TokenBudgetBatchSampler(BatchRebalanceSampler):
    def __init__(
        self,
        lengths: list[int],
        max_tokens: int,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
    ):
        require_support()
        if max_tokens < 1:
            raise ValueError(f"max_tokens_per_batch must be positive, got {max_tokens}")
        if not lengths:
            raise ValueError("token-budget batching needs a non-empty dataset")
        self.lengths, self.max_tokens, self.seed, self.shuffle = list(lengths), max_tokens, seed, shuffle
        self.rank, self.world_size, self.epoch = rank, world_size, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _epoch_batches(self) -> list[list[int]]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.lengths), generator=generator).tolist()
        else:
            order = list(range(len(self.lengths)))
        batches = plan_batches(order, self.lengths, self.max_tokens)
        usable = len(batches) - len(batches) % self.world_size if len(batches) >= self.world_size else 0
        return batches[self.rank : usable : self.world_size]

    def __iter__(self):
        return iter(self._epoch_batches())

    def __len__(self) -> int:
        return len(self._epoch_batches())
