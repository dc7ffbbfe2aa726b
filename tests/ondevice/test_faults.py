"""The on-device runtime under bad input: learning rates that would turn every weight into NaN, saves of
non-finite weights, batches that disagree with the manifest, damaged manifests. Each ends in one clear
error and the checkpoint on disk stays whole."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from tests import tiny_models
from tests.ondevice.conftest import NUM_LABELS

pytestmark = pytest.mark.requires_onnx
POSITIONS = tiny_models.CONFIGS["bert"][1]["max_position_embeddings"]


def good_batch(size: int = 2, length: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "input_ids": rng.integers(3, tiny_models.VOCAB, (size, length)),
        "attention_mask": np.ones((size, length), np.int64),
        "labels": rng.integers(0, NUM_LABELS, (size,)),
    }


@pytest.fixture
def module(exported, tmp_path):
    from turbotrain import ondevice

    directory = tmp_path / "artifacts"
    shutil.copytree(exported.directory, directory)
    return ondevice.Module(directory)


@pytest.mark.parametrize("lr", [math.nan, math.inf, -math.inf, -1e-3])
def test_non_finite_or_negative_learning_rates_are_refused(module, lr):
    from turbotrain import ondevice

    optimizer = ondevice.AdamW(module)
    with pytest.raises(ValueError, match="learning rate must be a finite number >= 0"):
        optimizer.set_learning_rate(lr)
    module.checkpoint.learning_rate = lr  # set behind the optimizer's back: step refuses it too
    before = {n: p.copy() for n, p in module.params.items()}
    module.train_step(good_batch())
    with pytest.raises(ValueError, match="learning rate must be a finite number >= 0"):
        optimizer.step()
    assert module.checkpoint.step == 0
    assert all(np.array_equal(before[n], p) for n, p in module.params.items())


def test_an_update_that_makes_weights_non_finite_is_not_applied(module):
    from turbotrain import ondevice

    optimizer = ondevice.AdamW(module)
    module.train_step(good_batch())
    name = module.manifest.trainable[0]
    module.grads[name] = np.full_like(module.grads[name], np.nan)
    before = module.params[name].copy()
    with pytest.raises(FloatingPointError, match=f"{name}.*not applied"):
        optimizer.step()
    np.testing.assert_array_equal(module.params[name], before)
    assert module.checkpoint.step == 0


def test_non_finite_weights_are_never_saved_over_a_checkpoint(module):
    path = module.directory / "checkpoint.safetensors"
    saved = path.read_bytes()
    name = module.manifest.trainable[0]
    module.params[name] = module.params[name].copy()
    module.params[name].flat[0] = np.nan
    with pytest.raises(ValueError, match=f"refusing to save.*param/{name}.*NaN or inf"):
        module.save_checkpoint()
    assert path.read_bytes() == saved
    assert sorted(p.name for p in module.directory.iterdir() if "checkpoint" in p.name) == [path.name]


def test_a_save_cut_off_midway_keeps_the_previous_checkpoint(module, monkeypatch):
    import turbotrain.ondevice.checkpoint as checkpoint_module

    path = module.directory / "checkpoint.safetensors"
    saved = path.read_bytes()

    def dies_halfway(tensors, filename, metadata=None):
        with open(filename, "wb") as handle:
            handle.write(b"\0" * 100)
        raise OSError("No space left on device")

    monkeypatch.setattr(checkpoint_module, "save_file", dies_halfway)
    with pytest.raises(OSError, match="No space left"):
        module.save_checkpoint()
    assert path.read_bytes() == saved
    assert sorted(p.name for p in module.directory.iterdir() if "checkpoint" in p.name) == [path.name]


def test_checkpoints_are_flushed_to_disk_before_the_rename(module, monkeypatch):
    import turbotrain.ondevice.checkpoint as checkpoint_module

    events = []
    real_fsync, real_replace = checkpoint_module.os.fsync, checkpoint_module.os.replace
    monkeypatch.setattr(checkpoint_module.os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(checkpoint_module.os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    module.save_checkpoint()
    assert events[:2] == ["fsync", "replace"] and events[-1] == "fsync"  # file, rename, then the directory


BAD_BATCHES = {
    "negative id": (
        lambda b: {**b, "input_ids": np.where(b["input_ids"] == b["input_ids"][0, 0], -100, b["input_ids"])},
        r"input_ids .* outside \[0, 97\)",
    ),
    "id past the vocabulary": (lambda b: {**b, "input_ids": b["input_ids"] + 97}, r"input_ids .* outside \[0, 97\)"),
    "float ids": (lambda b: {**b, "input_ids": b["input_ids"] + 0.7}, "input_ids must hold integers"),
    "label out of range": (
        lambda b: {**b, "labels": b["labels"] + NUM_LABELS},
        rf"labels .* outside \[0, {NUM_LABELS}\) \(or -100\)",
    ),
    "float labels": (lambda b: {**b, "labels": b["labels"].astype(np.float32)}, "labels must hold integers"),
    "mask not 0/1": (lambda b: {**b, "attention_mask": b["attention_mask"] * 2}, "attention_mask must hold 0 and 1"),
    "too long": (lambda b: good_batch(length=POSITIONS + 1), f"sequence of {POSITIONS + 1} tokens.* {POSITIONS}"),
    "mask shorter than ids": (
        lambda b: {**b, "attention_mask": b["attention_mask"][:, :-1]},
        "attention_mask has shape .* input_ids has shape .* disagree on 'sequence'",
    ),
    "labels for another batch size": (lambda b: {**b, "labels": np.zeros(3, np.int64)}, "disagree on 'batch'"),
    "wrong rank": (lambda b: {**b, "input_ids": b["input_ids"][0]}, "expected axes"),
    "empty": (lambda b: good_batch(size=0), "empty"),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_batches_are_checked_against_the_manifest(module, case):
    change, message = BAD_BATCHES[case]
    with pytest.raises(ValueError, match=message):
        module.train_step(change(good_batch()))
    with pytest.raises(ValueError, match=message):
        module.eval_step(change(good_batch()))
    assert module.grads == {}


def test_ignored_labels_and_python_lists_are_accepted(module):
    batch = {k: v.tolist() for k, v in good_batch().items()}
    batch["labels"][0] = -100
    assert math.isfinite(module.train_step(batch))


def write_manifest(tmp_path, exported, change) -> None:
    data = json.loads((exported.directory / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(change(data))


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda d: "{not json", "manifest.json is not valid JSON"),
        (lambda d: "[1, 2]", "manifest.json must hold a JSON object"),
        (lambda d: json.dumps({k: v for k, v in d.items() if k != "trainable"}), "manifest.json lacks 'trainable'"),
        (
            lambda d: json.dumps({**d, "optimizer": {k: v for k, v in d["optimizer"].items() if k != "betas"}}),
            "manifest.json: optimizer lacks 'betas'",
        ),
        (
            lambda d: json.dumps({**d, "batch_inputs": {"input_ids": {"dtype": "int64"}}}),
            "manifest.json: batch_inputs.input_ids lacks 'axes'",
        ),
        (lambda d: json.dumps({**d, "colour": "blue"}), "manifest.json: unknown key 'colour'"),
    ],
)
def test_a_damaged_manifest_names_the_file_and_the_problem(tmp_path, exported, change, message):
    from turbotrain import ondevice

    write_manifest(tmp_path, exported, change)
    with pytest.raises(ValueError, match=message):
        ondevice.Manifest.load(tmp_path)


def test_a_manifest_from_before_limits_still_checks_signs(tmp_path, exported):
    from turbotrain import ondevice

    shutil.copytree(exported.directory, tmp_path / "old")
    write_manifest(tmp_path / "old", exported, lambda d: json.dumps({k: v for k, v in d.items() if k != "limits"}))
    module = ondevice.Module(tmp_path / "old")
    assert module.manifest.limits == {}
    with pytest.raises(ValueError, match=r"input_ids .* negative"):
        module.train_step({**good_batch(), "input_ids": -good_batch()["input_ids"]})


def test_a_truncated_checkpoint_names_the_file(module):
    from turbotrain import ondevice

    path = module.directory / "checkpoint.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError, match="checkpoint.safetensors is not a readable checkpoint"):
        ondevice.Checkpoint.load(path)
