"""Every form of checkpoint Trainer writes or a user legitimately makes resumes, truncation and deleted files are
still caught, and refusals begin with stock Trainer's own messages (issue 36)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from tests.test_checkpoints import SAVES, cut, reshard
from tests.trainer_helpers import turbo_trainer
from turbotrain.training import checkpoints

TENSORS = {"a": torch.arange(64.0), "b": torch.ones(32)}


def checkpoint(folder, weights: str = "model.safetensors", commit: bool = True):
    """A checkpoint folder with `weights` (a safetensors or torch file), state files, and turbotrain's manifest."""
    folder.mkdir(parents=True)
    path = folder / weights
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(TENSORS, path) if weights.endswith(".safetensors") else torch.save(TENSORS, path)
    (folder / "optimizer.pt").write_bytes(b"optimizer")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    if commit:
        checkpoints.commit(folder)
    return folder


@pytest.mark.parametrize(
    "weights", ["model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "first/adapter_model.bin"]
)
def test_every_single_file_form_is_good_and_its_truncation_caught(tmp_path, weights):
    committed = checkpoint(tmp_path / "turbo" / "checkpoint-1", weights)
    stock = checkpoint(tmp_path / "stock" / "checkpoint-1", weights, commit=False)
    assert checkpoints.problem(committed) is None and checkpoints.problem(stock) is None
    for folder in (committed, stock):
        cut(folder / weights)
        assert weights in checkpoints.problem(folder) and "truncated" in checkpoints.problem(folder)


def test_a_checkpoint_resharded_after_its_commit_is_good(tmp_path):
    folder = checkpoint(tmp_path / "checkpoint-1")
    shards = reshard(folder)
    assert checkpoints.problem(folder) is None
    cut(folder / shards[0])
    assert f"{shards[0]} is" in checkpoints.problem(folder)


def test_a_deleted_shard_or_weights_file_is_still_caught(tmp_path):
    resharded = checkpoint(tmp_path / "checkpoint-1")
    shards = reshard(resharded)
    (resharded / shards[1]).unlink()
    assert "model.safetensors is missing" in checkpoints.problem(resharded)
    deleted = checkpoint(tmp_path / "checkpoint-2")
    (deleted / "model.safetensors").unlink()
    assert "model.safetensors is missing" in checkpoints.problem(deleted)
    state_gone = checkpoint(tmp_path / "checkpoint-3")
    reshard(state_gone)
    (state_gone / "optimizer.pt").unlink()
    assert "optimizer.pt is missing" in checkpoints.problem(state_gone)


def test_sharded_weights_written_so_are_checked_by_their_checksums(tmp_path):
    folder = tmp_path / "checkpoint-1"
    folder.mkdir()
    shards = reshard(checkpoint(tmp_path / "source", commit=False))
    for name in [*shards, "model.safetensors.index.json", "optimizer.pt", "trainer_state.json"]:
        (folder / name).write_bytes((tmp_path / "source" / name).read_bytes())
    checkpoints.commit(folder)
    assert checkpoints.problem(folder) is None
    data = bytearray((folder / shards[0]).read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: only the checksum sees it
    (folder / shards[0]).write_bytes(bytes(data))
    assert "checksum" in checkpoints.problem(folder)


def test_a_saved_model_without_trainer_state_resumes_when_named_as_stock_allows(tmp_path):
    folder = checkpoint(tmp_path / "saved", commit=False)
    (folder / "trainer_state.json").unlink()
    assert checkpoints.problem(folder, explicit=True) is None
    assert "cut off" in checkpoints.problem(folder)  # but resume_from_checkpoint=True does not pick it


def test_refusals_begin_with_stock_trainers_messages(tmp_path):
    trainer = turbo_trainer("bert", tmp_path, max_steps=1)
    with pytest.raises(ValueError, match=r"^No valid checkpoint found in output directory \("):
        trainer.train(resume_from_checkpoint=True)
    missing = tmp_path / "nowhere" / "checkpoint-3"
    with pytest.raises(ValueError, match=r"^Can't find a valid checkpoint at .*checkpoint-3; turbotrain: it does"):
        trainer.train(resume_from_checkpoint=str(missing))


def test_a_save_only_model_checkpoint_resumes(tmp_path):
    """(Transformers 5 always writes safetensors: `save_safetensors=False`'s `.bin` files are checked above.)"""
    turbo_trainer("bert", tmp_path, **SAVES, save_only_model=True).train()
    assert checkpoints.problem(tmp_path / "turbo" / "checkpoint-6") is None
    again = turbo_trainer("bert", tmp_path, **{**SAVES, "max_steps": 8}, save_only_model=True)
    again.train(resume_from_checkpoint=True)
    assert again.state.global_step == 8
