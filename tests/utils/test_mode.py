"""training_mode puts the model's own mode back, also when the block raises."""

from __future__ import annotations

import pytest
from torch import nn

from turbotrain.utils.mode import training_mode


@pytest.mark.parametrize("was", [True, False])
@pytest.mark.parametrize("on", [True, False])
def test_mode_inside_and_restored_after_a_raise(was, on):
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1)).train(was)
    with pytest.raises(RuntimeError), training_mode(model, on):
        assert model.training is on and model[1].training is on
        raise RuntimeError("probe failed")
    assert model.training is was and model[1].training is was
