"""turbotrain's warnings are shown once (the log line, not also Python's display of the same text), stay
catchable as TurbotrainWarning, and torch's pin_memory notice is silenced where there is no accelerator."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from torch.utils.data import DataLoader

from tests.trainer_helpers import stock_trainer, turbo_trainer
from turbotrain.utils.warnings import has_accelerator

WARN = "from turbotrain.utils.warnings import warn_once; warn_once('turbotrain: the pass steps aside')"
PIN = "'pin_memory' argument is set as true but no accelerator is found"


def python(code: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True)


def test_a_warning_is_printed_once():
    done = python(WARN)
    assert done.returncode == 0
    assert done.stderr.count("the pass steps aside") == 1, done.stderr
    assert "TurbotrainWarning" not in done.stderr and "warnings.warn" not in done.stderr


def test_a_warning_can_still_be_made_an_error():
    done = python(WARN, "-W", "error::UserWarning")
    assert done.returncode == 1 and "TurbotrainWarning: turbotrain: the pass steps aside" in done.stderr


def pin_memory_warnings(make_and_train) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_and_train()
    return [str(w.message) for w in caught if PIN in str(w.message)]


@pytest.mark.skipif(has_accelerator(), reason="the notice is only silenced on machines without an accelerator")
def test_pin_memory_notice_is_silenced_for_turbotrain_runs_on_a_cpu_only_machine(tmp_path):
    assert pin_memory_warnings(lambda: stock_trainer("bert", tmp_path, max_steps=1).train()), "stock warns"
    assert not pin_memory_warnings(lambda: turbo_trainer("bert", tmp_path, max_steps=1).train())


@pytest.mark.skipif(has_accelerator(), reason="the notice is only silenced on machines without an accelerator")
def test_pin_memory_notice_is_silenced_for_every_cli_command(tmp_path):
    from turbotrain.cli import main

    def cli_then_a_dataloader():
        main(["export", str(tmp_path), str(tmp_path / "onnx")])  # any command; this one fails fast
        list(DataLoader([1, 2], pin_memory=True))

    assert pin_memory_warnings(lambda: list(DataLoader([1, 2], pin_memory=True))), "torch warns by default"
    assert not pin_memory_warnings(cli_then_a_dataloader)
