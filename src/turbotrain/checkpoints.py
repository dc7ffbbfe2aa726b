"""Checkpoints that a kill cannot leave half-written in a form that loads.

Trainer writes a checkpoint as many files (weights, optimizer, scheduler, RNG states, trainer state)
into `checkpoint-N`; a SIGKILL in the middle leaves a directory that `resume_from_checkpoint=True`
would pick and fail on, or worse, load with a stale optimizer. TurboTrainer brackets every save:

1. `begin`: an empty `turbotrain-writing` file appears in `checkpoint-N` before anything else;
2. Trainer writes the checkpoint (its own code, unchanged);
3. `commit`: every file is flushed to disk (fsync), then `turbotrain-writing` is removed: the commit
   is that one atomic unlink. Older checkpoints are rotated away only after the commit.

On resume, a directory that still holds `turbotrain-writing` was cut off mid-save: it is renamed to
`incomplete-checkpoint-N` (kept for inspection, invisible to Trainer's resume and rotation) and the newest committed
checkpoint is used. Checkpoints written by stock Trainer (no marker) count as complete when their
`trainer_state.json` parses, as stock Trainer assumes.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from turbotrain.utils.warnings import warn_once

WRITING = "turbotrain-writing"
TRAINER_STATE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def begin(folder: str | Path) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / WRITING).touch()
    _fsync_directory(folder)


def commit(folder: str | Path) -> None:
    folder = Path(folder)
    for path in folder.rglob("*"):
        if path.is_file() and path.name != WRITING:
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    (folder / WRITING).unlink(missing_ok=True)
    _fsync_directory(folder)


def is_complete(folder: str | Path) -> bool:
    folder = Path(folder)
    if (folder / WRITING).exists():
        return False
    try:
        json.loads((folder / TRAINER_STATE).read_text())
    except (OSError, ValueError):
        return False
    return True


def last_complete_checkpoint(output_dir: str | Path) -> str | None:
    """The newest complete `checkpoint-N` in `output_dir`; incomplete newer ones are set aside."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in output_dir.iterdir()
                   if p.is_dir() and (m := _CHECKPOINT.match(p.name)))
    for _, path in reversed(found):
        if is_complete(path):
            return str(path)
        aside = path.with_name("incomplete-" + path.name)  # outside Trainer's `checkpoint-*` rotation
        path.rename(aside)
        warn_once(f"turbotrain: {path} was cut off while being written; moved to {aside.name}, resuming from "
                  "the previous complete checkpoint")
    return None


def _fsync_directory(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
