"""Checkpoints that neither a kill nor later damage can pass off as good.

Trainer writes a checkpoint as many files (weights, optimizer, scheduler, RNG states, trainer state)
into `checkpoint-N`; a SIGKILL in the middle leaves a directory that `resume_from_checkpoint=True`
would pick and fail on, or worse, load with a stale optimizer. TurboTrainer brackets every save:

1. `begin`: an empty `turbotrain-writing` file appears in `checkpoint-N` before anything else;
2. Trainer writes the checkpoint (its own code, unchanged);
3. `commit`: every file is flushed to disk (fsync) and its size and SHA-256 are recorded in
   `turbotrain-manifest.json` (written to a temporary name, flushed, renamed); then `turbotrain-writing`
   is removed: the commit is that one atomic unlink. Older checkpoints are rotated away only after it.

On resume (`resume_checkpoint`), every candidate is checked (`problem`), newest first:

* `turbotrain-writing` still there: cut off mid-save. Renamed to `incomplete-checkpoint-N`.
* A file of the manifest missing, of another size or another checksum (truncated, deleted, flipped
  bits), or `trainer_state.json` unreadable: damaged. Renamed to `damaged-checkpoint-N`.

Set-aside folders are kept for inspection (a second one for the same step gets `-2`, `-3`, ...) and are
invisible to Trainer's resume and rotation; one warning names the folder, the bad file and the
checkpoint the run resumes from instead: the newest good one. An explicit `resume_from_checkpoint="path"` that is missing, cut off
or damaged is refused with the reason. Refusals begin with stock Trainer's message for the case ("Can't find
a valid checkpoint at <path>", "No valid checkpoint found in output directory (<dir>)"), turbotrain's reason
after it, so code matching stock's text keeps working.

Every form of weights Trainer writes or a user legitimately makes is good (checkpoint_weights.py): one file
or shards with their index, safetensors or `.bin` (`save_safetensors=False`), PEFT's adapter only, and
weights resharded or converted after the commit (the recorded weight files gone, another whole form there:
each of its files is then checked by its structure, since no checksum was recorded for it). Checkpoints
without the manifest (written by stock Trainer) count as good when their weights are structurally whole
and their `trainer_state.json` parses, as stock Trainer assumes; an explicit path with no `trainer_state.json`
(a saved model) resumes its weights, as stock does. One without `optimizer.pt` or `scheduler.pt`
(`save_only_model`) still resumes, with a warning that the optimizer or schedule starts fresh.

When training begins, if the run will save, `WritableOutput` (a hidden callback) refuses an output folder no
file can be created in (`check_writable`; stock fails at its first save, `save_steps` steps later); a full disk
during a save (ENOSPC) is raised as one OSError naming the folder left cut off and what to do
(`disk_full_named`).

Cost: the commit reads every file once more for its checksum (SHA-256, ~1-2 GB/s on one core), and
resume reads the chosen checkpoint once. Per-rank RNG files of other data-parallel ranks
(`rng_state_1.pth`, ...) are not recorded: those ranks may still be writing them at the commit.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from transformers import TrainerCallback

from turbotrain.training import checkpoint_weights
from turbotrain.utils.warnings import warn_once

WRITING = "turbotrain-writing"
MANIFEST = "turbotrain-manifest.json"
TRAINER_STATE = "trainer_state.json"
RESUME_STATE = ("optimizer.pt", "scheduler.pt")  # what a stock checkpoint needs to resume like a full run
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_OTHER_RANK = re.compile(r"^rng_state_[1-9]\d*\.pth$")
CUT_OFF = "cut off while being written"
NONE_FOUND = "No valid checkpoint found in output directory"  # stock Trainer's messages, where it has one
NOT_VALID = "Can't find a valid checkpoint at"


def begin(folder: str | Path) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / WRITING).touch()
    _fsync(folder)


def commit(folder: str | Path) -> None:
    folder = Path(folder)
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name not in (WRITING, MANIFEST):
            _fsync(path)
            if not _OTHER_RANK.match(path.name):
                files[path.relative_to(folder).as_posix()] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
    partial = folder / f"{MANIFEST}.partial"
    partial.write_text(json.dumps({"files": files}, indent=1) + "\n")
    _fsync(partial)
    os.replace(partial, folder / MANIFEST)
    (folder / WRITING).unlink(missing_ok=True)
    _fsync(folder)


def problem(folder: str | Path, explicit: bool = False) -> str | None:
    """Why `folder` cannot be resumed from (a phrase naming the file), or None when it is good. `explicit`: the
    user named it (`resume_from_checkpoint="path"`): a folder without turbotrain's manifest and without
    `trainer_state.json` (a saved model) resumes its weights, as stock Trainer does."""
    folder = Path(folder)
    if not folder.is_dir():
        return "it does not exist"
    if (folder / WRITING).exists():
        return f"it was {CUT_OFF} ({WRITING} is still there)"
    if (folder / MANIFEST).exists():
        damage = _manifest_problem(folder)
    else:  # written by stock Trainer, or before turbotrain: the weights' own structure is what can be checked
        damage = checkpoint_weights.problem_in(folder)
        if damage is None and not (folder / TRAINER_STATE).exists():
            return None if explicit else f"it was {CUT_OFF} (no {TRAINER_STATE})"
    if damage is not None:
        return damage
    try:
        json.loads((folder / TRAINER_STATE).read_text())
    except (OSError, ValueError) as error:
        return f"{TRAINER_STATE} is unreadable ({type(error).__name__}: {error})"
    return None


def is_complete(folder: str | Path) -> bool:
    return problem(folder) is None


def last_complete_checkpoint(output_dir: str | Path) -> str | None:
    """The newest good `checkpoint-N` in `output_dir`; newer cut-off or damaged ones are set aside."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    found = sorted(
        (int(m.group(1)), p) for p in output_dir.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name))
    )
    set_aside = []  # (path, reason, the folder it was moved to): said once the checkpoint resumed from is known
    good = None
    for _, path in reversed(found):
        reason = problem(path)
        if reason is None:
            good = path
            break
        aside = _free_name(path, "incomplete-" if CUT_OFF in reason else "damaged-")
        path.rename(aside)
        set_aside.append((path, reason, aside))
    then = f"resuming from {good.name}" if good is not None else "no good checkpoint is left to resume from"
    for path, reason, aside in set_aside:
        warn_once(f"turbotrain: {path}: {reason}; moved to {aside.name}, {then}")
    return str(good) if good is not None else None


def resume_checkpoint(resume_from_checkpoint, output_dir: str | Path):
    """What `Trainer.train(resume_from_checkpoint=...)` should get: True -> the newest good checkpoint;
    a path -> itself, if good; anything else unchanged. Refusals are ValueErrors that begin with stock
    Trainer's own message for the case (`NONE_FOUND`, `NOT_VALID`), turbotrain's reason after it."""
    if resume_from_checkpoint is True:
        resume_from_checkpoint = last_complete_checkpoint(output_dir)
        if resume_from_checkpoint is None:
            raise ValueError(f"{NONE_FOUND} ({output_dir}); turbotrain: none of its checkpoints is complete")
    elif isinstance(resume_from_checkpoint, (str, os.PathLike)):
        reason = problem(resume_from_checkpoint, explicit=True)
        if reason is not None:
            raise ValueError(
                f"{NOT_VALID} {resume_from_checkpoint}; turbotrain: {reason}{_listing(resume_from_checkpoint)}"
            )
    else:
        return resume_from_checkpoint
    _warn_missing_resume_state(Path(resume_from_checkpoint))
    return str(resume_from_checkpoint)


def check_writable(output_dir: str | Path) -> None:
    """Refuse, before the first step, an existing `output_dir` no file can be created in (stock Trainer finds out
    at its first save, after `save_steps` steps): the OSError of the failed write, with what to do."""
    if not os.path.isdir(output_dir):
        return  # Trainer creates it at the first save
    try:
        descriptor, name = tempfile.mkstemp(prefix=".turbotrain-write-check-", dir=output_dir)
    except OSError as error:
        raise type(error)(
            f"turbotrain: output_dir {output_dir} is not writable ({error.strerror or error}): checkpoints would "
            "fail at the first save; choose a writable output_dir"
        ) from None
    os.close(descriptor)
    os.unlink(name)


class WritableOutput(TrainerCallback):
    """When training begins, before the first step: `check_writable(args.output_dir)` if the run will save a
    checkpoint (any save strategy but "no": Trainer saves a "steps" run at its last step too), so no run that
    never saves is refused."""

    def on_train_begin(self, args, state, control, **kwargs):
        if args.should_save and str(getattr(args.save_strategy, "value", args.save_strategy)) != "no":
            check_writable(args.output_dir)


@contextlib.contextmanager
def disk_full_named(folder: str | Path):
    """A full disk while saving `folder` (ENOSPC) raised as one OSError that says what is left and what to do."""
    try:
        yield
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        raise OSError(
            errno.ENOSPC,
            f"turbotrain: {error.strerror or 'No space left on device'} while saving {folder}; it stays marked as "
            "cut off, so resume_from_checkpoint=True resumes from the last complete checkpoint; free space (or "
            "lower save_total_limit) and resume",
        ) from None


def _manifest_problem(folder: Path) -> str | None:
    try:
        files = json.loads((folder / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"{MANIFEST} is unreadable ({type(error).__name__}: {error})"
    weights = {name: recorded for name, recorded in files.items() if checkpoint_weights.is_weights(name)}
    state = {name: recorded for name, recorded in files.items() if name not in weights}
    missing = [name for name in weights if not (folder / name).is_file()]
    if not missing:
        return _recorded_problem(folder, files)
    # weights rewritten since the commit (resharded, converted): good if another whole form of them is there
    for name in missing:
        if not checkpoint_weights.has_a_form((folder / name).parent):
            return f"{name} is missing (it was written at the commit, and no other form of the weights is there)"
    return _recorded_problem(folder, state) or checkpoint_weights.problem_in(folder)


def _recorded_problem(folder: Path, files: dict) -> str | None:
    """The first of `files` (name -> recorded bytes and sha256) missing, resized or changed since the commit."""
    for name, recorded in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing (it was written at the commit)"
        size = path.stat().st_size
        if size != recorded["bytes"]:
            return f"{name} is {size} bytes, {recorded['bytes']} when written (truncated or overwritten)"
        if _sha256(path) != recorded["sha256"]:
            return f"{name} does not match the checksum recorded when it was written (damaged on disk)"
    return None


def _warn_missing_resume_state(folder: Path) -> None:
    """Stock checkpoints carry no manifest: say when resuming will restart the optimizer or schedule."""
    if (folder / MANIFEST).exists():
        return
    for name in RESUME_STATE:
        if not (folder / name).exists():
            warn_once(
                f"turbotrain: {folder} has no {name}: the {name.split('.')[0]} starts fresh, so the losses "
                "will differ from an uninterrupted run (written by stock Trainer or with save_only_model?)"
            )


def _listing(path) -> str:
    parent = Path(path).parent
    found = sorted(
        (int(m.group(1)), p.name)
        for p in (parent.iterdir() if parent.is_dir() else ())
        if p.is_dir() and (m := _CHECKPOINT.match(p.name))
    )
    names = [name for _, name in found]
    return f" (checkpoints in {parent}: {', '.join(names)})" if names else ""


def _free_name(path: Path, prefix: str) -> Path:
    """`<prefix>checkpoint-N`, or `-2`, `-3`, ... when an earlier kill at the same step took that name."""
    aside, number = path.with_name(prefix + path.name), 1
    while aside.exists():
        number += 1
        aside = path.with_name(f"{prefix}{path.name}-{number}")
    return aside


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
