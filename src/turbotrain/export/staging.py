"""Write an export into a temporary folder and move it into place only when it is whole and verified.

`staged(out_dir)` yields a fresh folder created beside `out_dir` (same parent, so the final move is a
rename on one filesystem). When the block finishes, the folder becomes `out_dir`; when it raises, the
folder is removed and `out_dir` is untouched. So a failed verification leaves nothing half-written,
and a new export replaces an earlier one whole: no `model.optimized.onnx` or `model.int8.onnx` of an
earlier export is left beside a new `model.onnx`.

`out_dir` must be new, empty, or an earlier export (it holds `model.onnx`); a folder holding
anything else is refused up front, before any work, rather than replaced. Replacing an earlier export
is two renames (old aside, new in) and a removal of the old folder; a crash between the two renames
leaves both folders, named, beside the target.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

EXPORTED = "model.onnx"  # what marks a folder as an earlier export


def check_target(out_dir: str | Path) -> Path:
    """`out_dir` as a Path, if an export may be moved there; ValueError naming the problem otherwise."""
    out_dir = Path(out_dir).absolute()
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"{out_dir} is a file; give a folder to export into")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / EXPORTED).is_file():
        raise ValueError(
            f"{out_dir} holds files and is not an earlier export (no {EXPORTED}); an export replaces "
            "its folder whole, so give a new or empty folder"
        )
    parent = out_dir.parent
    if parent.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write into {parent} (permission denied); choose another output folder")
    return out_dir


@contextmanager
def staged(out_dir: str | Path) -> Iterator[Path]:
    out_dir = check_target(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.export-", dir=out_dir.parent))
    try:
        yield folder
        _move_into_place(folder, out_dir)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _move_into_place(folder: Path, out_dir: Path) -> None:
    if not out_dir.exists():
        os.rename(folder, out_dir)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.replaced-", dir=out_dir.parent))
    os.rename(out_dir, old / out_dir.name)
    os.rename(folder, out_dir)
    shutil.rmtree(old, ignore_errors=True)
