"""Where turbotrain keeps what it makes once per machine: the collected corpus and trained tokenizers
(data/), the `auto` backend's measured choices, the onnxruntime backend's exported graphs.

`$TURBOTRAIN_CACHE` if set, else `$XDG_CACHE_HOME/turbotrain`, else `~/.cache/turbotrain`, read at each
call (so a test or a job can point it elsewhere at any time). `cache_dir()` creates it; `cache_root()`
only names it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_root() -> Path:
    root = os.environ.get("TURBOTRAIN_CACHE")
    if root is None:
        root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "turbotrain"
    return Path(root)


def cache_dir() -> Path:
    path = cache_root()
    path.mkdir(parents=True, exist_ok=True)
    return path


def digest(*parts: str) -> str:
    """A short stable hash of `parts`, for cache keys."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so that a reader never sees a half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
