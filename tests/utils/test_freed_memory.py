"""What the install's self-checks freed goes back to the system before training (issue 34: a turbotrain process
held 0.5-0.6 GB more than stock's before its first step at a 151,936 vocabulary)."""

from __future__ import annotations

import sys

import pytest

from tests.trainer_helpers import dataset, turbo_trainer
from turbotrain import trainer as trainer_module
from turbotrain.utils.freed_memory import release_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_trims_the_c_heap_on_linux():
    assert release_freed_memory() is True


def test_the_trainer_releases_freed_memory_after_installing_its_passes(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(trainer_module, "release_freed_memory", lambda: calls.append(True))
    trainer = turbo_trainer("gpt2", tmp_path, train_dataset=dataset(8))
    assert calls and "label_sparsity" in trainer.turbo_report.applied
