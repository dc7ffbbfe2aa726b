"""The summary line reaches the trackers Trainer reports to, as run config (trackers.py)."""

from __future__ import annotations

import logging
import sys
import types

from transformers.integrations import MLflowCallback, TensorBoardCallback, WandbCallback

from tests.trainer_helpers import turbo_trainer
from turbotrain.training.trackers import report_summary


class FakeWriter:
    """What TensorBoardCallback calls on its SummaryWriter."""

    def __init__(self):
        self.texts: dict[str, str] = {}

    def add_text(self, tag, text, step=None):
        self.texts[tag] = text

    def add_scalar(self, *args, **kwargs):
        pass

    def flush(self):
        pass

    def close(self):
        pass


def tensorboard_callback(writer) -> TensorBoardCallback:
    """Trainer's own TensorBoard callback with a writer of ours (tensorboard itself is not needed)."""
    callback = TensorBoardCallback.__new__(TensorBoardCallback)
    callback.tb_writer, callback.logging_dir, callback._SummaryWriter = writer, "unused", None
    return callback


def test_tensorboard_gets_the_summary_beside_trainer_s_args(tmp_path):
    writer = FakeWriter()
    trainer = turbo_trainer("gpt2", tmp_path, max_steps=1, backend="eager")
    trainer.add_callback(tensorboard_callback(writer))
    trainer.train()
    assert "args" in writer.texts, "TensorBoard's own on_train_begin ran first"
    assert writer.texts["turbotrain"].startswith("turbotrain: backend eager; passes: label_sparsity")


def test_wandb_and_mlflow_get_it_as_run_config(monkeypatch):
    updates, params = {}, {}
    config = types.SimpleNamespace(update=lambda values, allow_val_change=False: updates.update(values))
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(run=types.SimpleNamespace(config=config)))
    mlflow = types.SimpleNamespace(active_run=lambda: object(), log_param=lambda k, v: params.update({k: v}))
    monkeypatch.setitem(sys.modules, "mlflow", mlflow)
    callbacks = [WandbCallback.__new__(WandbCallback), MLflowCallback.__new__(MLflowCallback)]
    trainer = types.SimpleNamespace(callback_handler=types.SimpleNamespace(callbacks=callbacks))
    assert report_summary(trainer, "turbotrain: backend eager") == ["WandbCallback", "MLflowCallback"]
    assert updates == {"turbotrain": "turbotrain: backend eager"} and params == updates


def test_a_tracker_that_fails_does_not_stop_training(caplog):
    class BrokenWriter(FakeWriter):
        def add_text(self, tag, text, step=None):
            raise OSError("disk full")

    trainer = types.SimpleNamespace(
        callback_handler=types.SimpleNamespace(callbacks=[tensorboard_callback(BrokenWriter())])
    )
    with caplog.at_level(logging.INFO, logger="turbotrain"):
        assert report_summary(trainer, "turbotrain: backend eager") == []
    assert "not sent to TensorBoardCallback: disk full" in caplog.text
