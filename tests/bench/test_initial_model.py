"""bench/initial_model.py: the initial model on disk, a fresh independent copy per peer."""

from __future__ import annotations

import torch
from torch import nn

from turbotrain.bench.initial_model import SpilledModel, fresh_copy


def test_each_copy_has_the_initial_weights_and_shares_no_tensor():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    spilled = SpilledModel(model)
    assert spilled.spilled and spilled.path.exists()
    first, second = spilled.copy(), fresh_copy(spilled)
    with torch.no_grad():
        first[0].weight.add_(1.0)  # training one peer's copy leaves the next peer's start untouched
    for theirs, mine in zip(model.parameters(), second.parameters()):
        assert torch.equal(theirs, mine) and theirs.data_ptr() != mine.data_ptr()
    path = spilled.path
    spilled.close()
    assert not path.exists()


def test_a_model_that_cannot_be_pickled_stays_in_memory():
    model = nn.Linear(4, 4)
    model.scale = lambda x: 2 * x  # a local function: deepcopy keeps it, pickle cannot
    spilled = SpilledModel(model)
    assert not spilled.spilled
    copy = spilled.copy()
    assert copy is not model and torch.equal(copy.weight, model.weight)
    spilled.close()
