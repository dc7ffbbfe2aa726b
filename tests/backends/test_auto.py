"""backend='auto' measures eager against inductor on the run's own steps, keeps the faster, logs and caches it."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from tests.tiny_models import make
from tests.trainer_helpers import assert_losses_close, stock_trainer, train_losses, turbo_trainer
from turbotrain.backends import get_backend
from turbotrain.backends.auto import CACHE_FILE, AutoChooser


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_auto_stays_eager_on_a_run_too_short_to_measure(tmp_path, private_cache, caplog):
    trainer = turbo_trainer("gpt2", tmp_path, max_steps=3)
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        trainer.train()
    assert trainer.backend.name == "auto" and trainer.backend.choice == "eager"
    assert trainer.model._compiled_call_impl is None
    assert "auto: eager (a run of 3 steps is too short" in caplog.text
    assert not (private_cache / CACHE_FILE).exists()


@pytest.mark.parametrize("eager_s, inductor_s, expected", [(1.0, 2.0, "eager"), (2.0, 1.0, "inductor")])
def test_auto_keeps_the_faster_median(private_cache, eager_s, inductor_s, expected, caplog):
    backend = get_backend("auto", {"measure_steps": 2})
    backend.wrap_model(torch.nn.Linear(2, 2))
    chooser = AutoChooser(backend)
    chooser.key = "k"
    backend.use("inductor")  # as after the eager steps; compile is lazy, nothing runs here
    chooser.times = {"eager": [eager_s, eager_s * 1.1], "inductor": [inductor_s, inductor_s * 1.1]}
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        chooser.decide()
    assert backend.choice == expected
    assert (backend.model._compiled_call_impl is not None) == (expected == "inductor")
    assert f"turbotrain auto: {expected} chosen" in caplog.text
    assert json.loads((private_cache / CACHE_FILE).read_text())["k"]["choice"] == expected


@pytest.mark.requires_compiler
def test_auto_measures_both_on_the_real_steps_matches_stock_and_caches(tmp_path, private_cache, caplog):
    kw = dict(max_steps=5, backend_options={"min_steps": 0, "measure_steps": 1, "scope": "blocks"})
    turbo = turbo_trainer("gpt2", tmp_path, model=make("gpt2", dropout=False), **kw)
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        losses = train_losses(turbo)
    report = turbo.backend.report()
    assert report["choice"] in ("eager", "inductor") and report["eager_step_s"] > 0 and report["inductor_step_s"] > 0
    assert f"turbotrain auto: {report['choice']} chosen" in caplog.text
    stock = train_losses(stock_trainer("gpt2", tmp_path, model=make("gpt2", dropout=False), max_steps=5))
    assert_losses_close(losses, stock, rtol=1e-5)
    again = turbo_trainer("gpt2", tmp_path, model=make("gpt2", dropout=False), **kw)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        again.train()
    assert f"auto: {report['choice']} (cached measurement" in caplog.text
