"""Before any training: the output directory must be writable, and only one run may write into it.

`OutputDirLock` creates the directory, proves it writable with a probe file, and holds an exclusive
`fcntl.flock` on `<output_dir>/.turbotrain.lock` for the run (the kernel releases it when the process
ends, even on SIGKILL, so a stale lock file never blocks a later run). A second run into the same
directory gets a ValueError naming the holder's pid.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_NAME = ".turbotrain.lock"


class OutputDirLock:
    def __init__(self, output_dir: str | Path):
        self.output_dir = Path(output_dir)
        self._handle = None

    def __enter__(self) -> OutputDirLock:
        check_writable(self.output_dir)
        self._handle = open(self.output_dir / LOCK_NAME, "a+")  # noqa: SIM115 (held for the run)
        try:
            fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._handle.seek(0)
            holder = self._handle.read().strip() or "unknown"
            self._handle.close()
            raise ValueError(
                f"another run (pid {holder}) is writing to {self.output_dir}; wait for it to finish "
                "or choose another --output-dir"
            ) from None
        self._handle.seek(0)
        self._handle.truncate()
        self._handle.write(str(os.getpid()))
        self._handle.flush()
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()


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
