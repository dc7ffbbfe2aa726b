"""backend='inductor' trains with the same losses as eager stock Trainer, label sparsity included."""

from __future__ import annotations

import pytest

from tests.trainer_helpers import assert_losses_close, stock_trainer, train_losses, turbo_trainer


@pytest.mark.compile
def test_inductor_golden_losses_match_stock(tmp_path):
    kw = dict(max_steps=4)
    turbo = turbo_trainer("roberta", tmp_path, backend="inductor", **kw)
    assert turbo.backend.name == "inductor" and turbo.model._compiled_call_impl is not None
    assert_losses_close(train_losses(turbo), train_losses(stock_trainer("roberta", tmp_path, **kw)), rtol=1e-5)
