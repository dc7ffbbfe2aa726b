"""Before any training: the output directory must not hold an earlier run (unless --resume or --overwrite),
must be writable, and only one run may write into it.

`PRETRAIN_RUN` (utils/run_folder.py): a folder holding weights, checkpoints (kept or set aside) or a finished
run's report (`loss.png`, `compare.json`) is refused, before anything is created, with one line naming the
flags; `--resume` continues the run, `--overwrite` trains into the folder as before (its checkpoints are
rotated away as the new run saves its own, its model and tokenizer replaced at the end). `plan.json` alone
(a run stopped before its first checkpoint) is not a run: there is nothing to resume.

`OutputDirLock` creates the directory (and missing parents), proves it writable with a probe file, and holds
an exclusive `fcntl.flock` on `<output_dir>/.turbotrain.lock` for the run. A second run into the same
directory gets a ValueError naming the holder's pid.

On leaving, whatever the exit (a normal end, an error, a refusal after the lock), the lock file is removed,
and so are the directories the lock created if they are empty then: a refused or failed start leaves nothing
that was not there before, a run that wrote anything keeps its folder. Removing a flock'ed file is safe by
one rule, kept here: the file is unlinked while still locked, and a run that wins the lock checks that the
path still names the file it locked (same device and inode), else it opens the path again. A run that opened
the old file just before the unlink and locks it after the release sees the stale inode and retries on the
path's new file, so two runs never both hold the lock. SIGKILL skips the removal: the file stays, and the
kernel releases its lock with the process, so a stale lock file never blocks a later run (which removes it
at its own exit).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from turbotrain.utils.run_folder import CHECKPOINTS, WEIGHTS, RunFolder

LOCK_NAME = ".turbotrain.lock"
PRETRAIN_RUN = RunFolder(
    what="a run",
    marks=(*WEIGHTS, *CHECKPOINTS, "loss.png", "compare.json"),
    folder_flag="--output-dir",
    replaces="training into it: its checkpoints are rotated away as this run saves its own, its model, "
    "tokenizer and report replaced at the end",
    resumable=True,
)


class OutputDirLock:
    def __init__(self, output_dir: str | Path):
        self.output_dir = Path(output_dir)
        self._handle = None
        self._created: list[Path] = []  # the directories this lock made, deepest first

    def __enter__(self) -> OutputDirLock:
        self._created = [p for p in (self.output_dir, *self.output_dir.parents) if not p.exists()]
        try:
            check_writable(self.output_dir)
            self._handle = _locked(self.output_dir / LOCK_NAME)
        except BaseException:
            self._leave()
            raise
        self._handle.seek(0)
        self._handle.truncate()
        self._handle.write(str(os.getpid()))
        self._handle.flush()
        return self

    def __exit__(self, *exc) -> None:
        self._leave()

    def _leave(self) -> None:
        if self._handle is not None:
            (self.output_dir / LOCK_NAME).unlink(missing_ok=True)  # still locked: see the module docstring
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
        for directory in self._created:
            try:
                directory.rmdir()
            except OSError:  # not empty: the run wrote into it
                break


def _locked(path: Path):
    """An open handle of `path` holding its exclusive flock; ValueError naming the holder's pid when taken."""
    while True:
        handle = open(path, "a+")  # noqa: SIM115 (held for the run)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise ValueError(
                f"another run (pid {holder}) is writing to {path.parent}; wait for it to finish "
                "or choose another --output-dir"
            ) from None
        if _still_named(handle, path):
            return handle
        handle.close()  # its holder removed it on leaving, after this open: lock the path's new file


def _still_named(handle, path: Path) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(handle.fileno())
    return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)


def check_writable(output_dir: Path) -> None:
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / f".turbotrain-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ValueError(
            f"--output-dir {output_dir} is not writable ({error.strerror}); choose another "
            "directory or fix its permissions"
        ) from None
