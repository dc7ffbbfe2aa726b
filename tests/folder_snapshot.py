"""A folder tree as data: every file's bytes and every entry's mtime (the folder's own included), so two
equal snapshots mean nothing in it was written, added, removed or touched."""

from __future__ import annotations

from pathlib import Path


def snapshot(folder: Path) -> dict[str, tuple[bytes | None, int]]:
    entries = [folder, *sorted(folder.rglob("*"))]
    return {
        path.relative_to(folder).as_posix(): (path.read_bytes() if path.is_file() else None, path.stat().st_mtime_ns)
        for path in entries
    }
