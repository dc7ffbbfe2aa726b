"""turbotrain's own callbacks (auto's step timer, the summary) are driven but never listed (issue 36)."""

from __future__ import annotations

import logging

import torch
from transformers import DefaultFlowCallback, TrainerCallback

from tests.trainer_helpers import stock_trainer, turbo_trainer
from turbotrain.backends.auto import AutoChooser
from turbotrain.training.checkpoints import WritableOutput
from turbotrain.training.hidden_callbacks import ThreadsCallback
from turbotrain.training.run_summary import SummaryCallback


def callback_types(trainer) -> list[type]:
    return [type(callback) for callback in trainer.callback_handler.callbacks]


class Events(TrainerCallback):
    def __init__(self):
        self.seen = []

    def on_step_end(self, args, state, control, **kwargs):
        self.seen.append(state.global_step)


def test_the_public_callback_list_is_stocks(tmp_path):
    turbo = turbo_trainer("roberta", tmp_path / "turbo", max_steps=1)
    stock = stock_trainer("roberta", tmp_path / "stock", max_steps=1)
    assert callback_types(turbo) == callback_types(stock)
    assert turbo.callback_handler.callback_list == stock.callback_handler.callback_list
    assert isinstance(turbo.pop_callback(DefaultFlowCallback), DefaultFlowCallback)
    stock.remove_callback(DefaultFlowCallback)
    assert callback_types(turbo) == callback_types(stock)


def test_hidden_callbacks_still_see_every_event_after_the_public_ones(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path / "cache"))
    trainer = turbo_trainer("roberta", tmp_path, max_steps=2)
    events = Events()
    trainer.add_callback(events)
    hidden = [type(callback) for callback in trainer.callback_handler.hidden]
    assert hidden == [WritableOutput, AutoChooser, ThreadsCallback, SummaryCallback]
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        trainer.train()
    assert events.seen == [1, 2]
    assert any(r.getMessage().startswith("turbotrain: backend auto") for r in caplog.records)
    assert "too short" in trainer.backend.plan  # AutoChooser's on_train_begin ran


def test_while_hidden_callbacks_run_the_public_list_is_unchanged(tmp_path):
    trainer = turbo_trainer("roberta", tmp_path, max_steps=1, backend="eager")
    seen = []
    trainer.callback_handler.hidden.append(Peek(trainer, seen))
    trainer.train()
    assert seen and all(names == callback_types(trainer) for names in seen)


class Peek(TrainerCallback):
    def __init__(self, trainer, seen):
        self.trainer, self.seen = trainer, seen

    def on_step_end(self, args, state, control, **kwargs):
        self.seen.append(callback_types(self.trainer))


class BusyMachine:
    """`OtherWork` on a machine whose every usable core another process keeps busy."""

    def __init__(self, *args, **kwargs):
        self.cores = {0, 1}

    def seconds_since(self) -> float:
        return 10.0

    def sample(self) -> float:
        return 2.0


class ThreadsSeen(TrainerCallback):
    def __init__(self):
        self.seen = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.seen.append(torch.get_num_threads())


def run_beside_busy_cores(tmp_path, monkeypatch, steps: int):
    """A `steps`-step run from 2 torch threads on a machine whose 2 usable cores are busy: the trainer, the threads
    each step saw and torch's thread count at the end of training (put back to the caller's after)."""
    monkeypatch.setattr("turbotrain.trainer.OtherWork", BusyMachine)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        trainer, seen = turbo_trainer("bert", tmp_path, max_steps=steps), ThreadsSeen()
        trainer.add_callback(seen)
        trainer.train()
        return trainer, seen.seen, torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_a_cpu_run_beside_busy_cores_takes_fewer_threads_says_so_and_puts_them_back(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    trainer, seen, after = run_beside_busy_cores(tmp_path, monkeypatch, steps=3)
    assert seen == [1, 1, 1] and after == 2
    assert "threads: 1 of 2 usable cores (2.0 busy with other work)" in trainer.turbo_summary()


def test_the_users_thread_setting_stands(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    trainer, seen, _ = run_beside_busy_cores(tmp_path, monkeypatch, steps=2)
    assert seen == [2, 2] and "(OMP_NUM_THREADS)" in trainer.turbo_summary()
