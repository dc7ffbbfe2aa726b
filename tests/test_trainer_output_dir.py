"""`TurboTrainer` into an `output_dir` holding an earlier run's checkpoints does what stock `Trainer` does (issue 46).

Stock Trainer (Transformers 5: `overwrite_output_dir` is gone) never checks the folder: a new run writes its
`checkpoint-N` into it (over the earlier run's folder of the same step, file by file) and `save_total_limit`'s
rotation, newest by mtime kept, deletes the earlier run's checkpoints first. TurboTrainer must delete and keep
exactly the same: no more, no less."""

from __future__ import annotations

import os
import time

from tests.trainer_helpers import stock_trainer, turbo_trainer


def earlier_run(folder):
    """Three checkpoints of an earlier run, an hour old, one file each, and its final model."""
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"earlier model")
    old = time.time() - 3600
    for step in (2, 4, 6):
        checkpoint = folder / f"checkpoint-{step}"
        checkpoint.mkdir()
        (checkpoint / "earlier.txt").write_text(f"step {step}")
        os.utime(checkpoint / "earlier.txt", (old, old))
        os.utime(checkpoint, (old + step, old + step))
    return folder


def what_is_left(folder) -> dict[str, list[str]]:
    return {p.name: sorted(q.name for q in p.iterdir()) if p.is_dir() else [] for p in sorted(folder.iterdir())}


def test_a_new_run_into_an_earlier_runs_folder_keeps_and_deletes_what_stock_does(tmp_path):
    saves = dict(max_steps=4, save_strategy="steps", save_steps=2, save_total_limit=2)
    left = {}
    for name, make in (("stock", stock_trainer), ("turbo", turbo_trainer)):
        folder = earlier_run(tmp_path / name)
        make("bert", tmp_path, **saves).train()
        left[name] = what_is_left(folder)
    stock, turbo = left["stock"], left["turbo"]
    assert set(stock) == {"model.safetensors", "checkpoint-2", "checkpoint-4"}, "stock rotated the earlier run away"
    assert "earlier.txt" in stock["checkpoint-2"], "stock wrote checkpoint-2 into the earlier one, file by file"
    assert set(turbo) == set(stock)
    for name, files in stock.items():  # turbotrain's manifest is its only addition
        assert set(turbo[name]) - {"turbotrain-manifest.json"} == set(files)
    assert (tmp_path / "turbo" / "model.safetensors").read_bytes() == b"earlier model"
