"""Committed checkpoints: the marker logic on its own (the kill tests are in tests/scale/)."""

from __future__ import annotations

import json

import pytest

from turbotrain import checkpoints


def fake_checkpoint(folder, complete: bool = True):
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x")
    if complete:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    return folder


def test_a_checkpoint_counts_once_committed(tmp_path):
    folder = tmp_path / "checkpoint-2"
    checkpoints.begin(folder)
    (folder / "trainer_state.json").write_text("{}")
    assert not checkpoints.is_complete(folder)
    checkpoints.commit(folder)
    assert checkpoints.is_complete(folder)


def test_last_complete_checkpoint_sets_cut_off_ones_aside(tmp_path):
    fake_checkpoint(tmp_path / "checkpoint-2")
    checkpoints.begin(fake_checkpoint(tmp_path / "checkpoint-4"))          # killed mid-save
    fake_checkpoint(tmp_path / "checkpoint-10", complete=False)             # stock Trainer, cut off early
    with pytest.warns(UserWarning, match="cut off while being written"):
        assert checkpoints.last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    assert (tmp_path / "incomplete-checkpoint-4").is_dir() and (tmp_path / "incomplete-checkpoint-10").is_dir()


def test_stock_checkpoints_without_markers_are_complete_when_their_state_parses(tmp_path):
    assert checkpoints.is_complete(fake_checkpoint(tmp_path / "checkpoint-3"))
    broken = fake_checkpoint(tmp_path / "checkpoint-5")
    (broken / "trainer_state.json").write_text('{"global_st')
    assert not checkpoints.is_complete(broken)


def test_resuming_from_an_explicit_incomplete_checkpoint_is_refused(tmp_path):
    from tests.trainer_helpers import turbo_trainer

    folder = fake_checkpoint(tmp_path / "checkpoint-1")
    checkpoints.begin(folder)
    trainer = turbo_trainer("bert", tmp_path)
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        trainer.train(resume_from_checkpoint=str(folder))
