"""Committed checkpoints: the marker and manifest logic, and resuming from damaged checkpoints of a real
run (the kill tests are in tests/scale/)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.trainer_helpers import StepRecorder, stock_trainer, turbo_trainer
from turbotrain.training import checkpoints


def fake_checkpoint(folder, complete: bool = True):
    folder.mkdir(parents=True)
    save_file({"weight": torch.ones(4)}, folder / "model.safetensors")
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
    checkpoints.begin(fake_checkpoint(tmp_path / "checkpoint-4"))  # killed mid-save
    fake_checkpoint(tmp_path / "checkpoint-10", complete=False)  # stock Trainer, cut off early
    with pytest.warns(UserWarning, match="cut off while being written.*resuming from checkpoint-2$") as caught:
        assert checkpoints.last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    assert (tmp_path / "incomplete-checkpoint-4").is_dir() and (tmp_path / "incomplete-checkpoint-10").is_dir()
    assert all(str(w.message).endswith("resuming from checkpoint-2") for w in caught if "checkpoint" in str(w.message))


def test_when_no_good_checkpoint_is_left_the_warning_says_so(tmp_path):
    checkpoints.begin(fake_checkpoint(tmp_path / "checkpoint-4"))
    with pytest.warns(UserWarning, match="moved to incomplete-checkpoint-4, no good checkpoint is left to resume from"):
        assert checkpoints.last_complete_checkpoint(tmp_path) is None


def test_stock_checkpoints_without_markers_are_complete_when_their_state_parses(tmp_path):
    assert checkpoints.is_complete(fake_checkpoint(tmp_path / "checkpoint-3"))
    broken = fake_checkpoint(tmp_path / "checkpoint-5")
    (broken / "trainer_state.json").write_text('{"global_st')
    assert not checkpoints.is_complete(broken)


def test_resuming_from_an_explicit_incomplete_checkpoint_is_refused(tmp_path):
    folder = fake_checkpoint(tmp_path / "checkpoint-1")
    checkpoints.begin(folder)
    trainer = turbo_trainer("bert", tmp_path)
    with pytest.raises(ValueError, match="cut off while being written"):
        trainer.train(resume_from_checkpoint=str(folder))


def test_a_second_cut_off_save_of_the_same_step_is_set_aside_too(tmp_path):
    fake_checkpoint(tmp_path / "checkpoint-2")
    checkpoints.begin(fake_checkpoint(tmp_path / "incomplete-checkpoint-4"))  # from the first kill's resume
    checkpoints.begin(fake_checkpoint(tmp_path / "checkpoint-4"))  # the second kill, same step
    with pytest.warns(UserWarning, match="cut off while being written"):
        assert checkpoints.last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    assert (tmp_path / "incomplete-checkpoint-4" / "model.safetensors").exists()  # the first one is kept
    assert [p.name for p in tmp_path.glob("incomplete-checkpoint-4*")] != ["incomplete-checkpoint-4"]


# A real run: 6 steps of tiny BERT with TurboTrainer, checkpoints at 2, 4 and 6 (committed with manifests).
SAVES = dict(max_steps=6, save_strategy="steps", save_steps=2)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """(output dir of the uninterrupted run, its losses by step), for TurboTrainer and stock Trainer."""
    runs = {}
    for name, make_trainer in (("turbo", turbo_trainer), ("stock", stock_trainer)):
        tmp = tmp_path_factory.mktemp(name)
        trainer = make_trainer("bert", tmp, **SAVES)
        trainer.train()
        losses = {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e}
        runs[name] = (tmp / name, losses)
    return runs


def resume(tmp_path, finished_run, damage, kind="turbo", resume_from=True):
    """Copy the finished run, damage its newest checkpoint, resume; returns (steps trained, losses)."""
    import shutil

    source, full = finished_run[kind]
    out = tmp_path / "turbo"
    shutil.copytree(source, out)
    for checkpoint in out.glob("checkpoint-*"):
        (checkpoint / "trainer_state.json").write_text(
            (checkpoint / "trainer_state.json").read_text().replace(str(source), str(out))
        )
    damage(out / "checkpoint-6")
    trainer = turbo_trainer("bert", tmp_path, **{**SAVES, "max_steps": 8})
    recorder = StepRecorder()
    trainer.add_callback(recorder)
    trainer.train(resume_from_checkpoint=resume_from)
    losses = {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e and e["step"] <= 6}
    return recorder.steps, losses, full


def truncate(name):
    def damage(folder):
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: len(data) // 2])

    return damage


def delete(name):
    return lambda folder: (folder / name).unlink()


def flip_a_byte(name):
    def damage(folder):
        data = bytearray((folder / name).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (folder / name).write_bytes(bytes(data))

    return damage


DAMAGES = {
    "truncated model.safetensors": (truncate("model.safetensors"), "model.safetensors"),
    "truncated optimizer.pt": (truncate("optimizer.pt"), "optimizer.pt"),
    "deleted optimizer.pt": (delete("optimizer.pt"), "optimizer.pt"),
    "deleted scheduler.pt": (delete("scheduler.pt"), "scheduler.pt"),
    "flipped byte in model.safetensors": (flip_a_byte("model.safetensors"), "model.safetensors"),
    "garbage trainer_state.json": (lambda f: (f / "trainer_state.json").write_text("{not json"), "trainer_state.json"),
}


@pytest.mark.parametrize("case", sorted(DAMAGES))
def test_a_damaged_checkpoint_is_skipped_with_one_warning_naming_the_file(tmp_path, finished_run, case):
    damage, name = DAMAGES[case]
    with pytest.warns(UserWarning, match=f"checkpoint-6.*{name}") as caught:
        steps, losses, full = resume(tmp_path, finished_run, damage)
    (said,) = [str(w.message) for w in caught if "checkpoint-6" in str(w.message)]
    assert said.endswith("resuming from checkpoint-4"), said
    assert steps[0] == 5, "resume falls back to checkpoint-4"
    assert all(losses[s] == pytest.approx(full[s], rel=1e-6) for s in (5, 6)), (losses, full)
    assert (tmp_path / "turbo" / "damaged-checkpoint-6").is_dir()


def test_a_good_checkpoint_resumes_without_a_word(tmp_path, finished_run, recwarn):
    steps, losses, full = resume(tmp_path, finished_run, lambda folder: None)
    assert steps[0] == 7 and not [w for w in recwarn if "checkpoint" in str(w.message)]


def test_stock_checkpoints_resume_as_before_but_a_missing_optimizer_is_said(tmp_path, finished_run):
    steps, _, _ = resume(tmp_path, finished_run, lambda folder: None, kind="stock")
    assert steps[0] == 7
    with pytest.warns(UserWarning, match="checkpoint-6 has no optimizer.pt.*starts fresh"):
        steps, _, _ = resume(tmp_path / "again", finished_run, delete("optimizer.pt"), kind="stock")
    assert steps[0] == 7, "a stock checkpoint keeps working as today"


def test_an_explicit_resume_path_that_does_not_exist_says_so(tmp_path, finished_run):
    trainer = turbo_trainer("bert", tmp_path, **SAVES)
    source = finished_run["turbo"][0]
    with pytest.raises(
        ValueError,
        match="Can't find a valid checkpoint at .*checkpoint-66; turbotrain: it does not exist.*checkpoint-2, checkpoint-4, checkpoint-6",
    ):
        trainer.train(resume_from_checkpoint=str(source / "checkpoint-66"))


@pytest.mark.parametrize("case", ["garbage trainer_state.json", "truncated optimizer.pt"])
def test_an_explicit_damaged_checkpoint_is_refused_with_the_reason(tmp_path, finished_run, case):
    damage, name = DAMAGES[case]
    with pytest.raises(ValueError, match=f"checkpoint-6.*{name}.*(unreadable|bytes)") as caught:
        resume(tmp_path, finished_run, damage, resume_from=str(tmp_path / "turbo" / "checkpoint-6"))
    assert "cut off while being written" not in str(caught.value)


# Weights rewritten after the commit (more forms: tests/test_checkpoint_forms.py).


def reshard(folder, name: str = "model.safetensors", count: int = 3) -> list[str]:
    """Rewrite `name` as `count` shards and an index, as `save_pretrained(max_shard_size=...)` does (one
    shard per tensor proved nothing more and made a resume load dozens of files)."""
    tensors = load_file(folder / name)
    (folder / name).unlink()
    shards = {key: f"model-{i % count + 1:05d}-of-{count:05d}.safetensors" for i, key in enumerate(tensors)}
    for shard in sorted(set(shards.values())):
        save_file({key: tensors[key] for key, s in shards.items() if s == shard}, folder / shard)
    (folder / f"{name}.index.json").write_text(json.dumps({"metadata": {}, "weight_map": shards}))
    return sorted(set(shards.values()))


def cut(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])


def test_a_real_run_resumes_from_its_resharded_checkpoint(tmp_path, finished_run, recwarn):
    steps, losses, full = resume(tmp_path, finished_run, reshard)
    assert steps[0] == 7 and not [w for w in recwarn if "checkpoint-6" in str(w.message)]


def test_a_real_run_sets_a_resharded_checkpoint_with_a_cut_shard_aside(tmp_path, finished_run):
    def reshard_and_cut(folder):
        cut(folder / reshard(folder)[0])

    with pytest.warns(UserWarning, match="checkpoint-6: model-00001-of-.*truncated"):
        steps, _, _ = resume(tmp_path, finished_run, reshard_and_cut)
    assert steps[0] == 5
