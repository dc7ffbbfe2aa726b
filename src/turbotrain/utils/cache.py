"""Where turbotrain keeps what it makes once per machine: the collected corpus and trained tokenizers
(data/), the `auto` backend's, packed attention's (packed_attention.json) and the kernel-adding passes'
(pass_timing.json) measured choices, the bf16 matmul probe's answer (bf16_hint.py), the onnxruntime
backend's exported graphs.

`$TURBOTRAIN_CACHE` if set, else `$XDG_CACHE_HOME/turbotrain`, else `~/.cache/turbotrain`, read at each
call (so a test or a job can point it elsewhere at any time). `cache_dir()` creates it; `cache_root()`
only names it. `read_entry` / `write_entry`: one JSON table per file, one entry per key (`digest` of what the
entry is valid for: the machine, the versions, the run), written atomically; an unreadable table reads as empty.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

from turbotrain.utils.warnings import warn_once


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


def read_entry(file_name: str, key: str) -> dict | None:
    """The entry stored under `key` in the cache's JSON table `file_name`, or None."""
    try:
        return json.loads((cache_dir() / file_name).read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None


def write_entry(file_name: str, key: str, entry: dict) -> None:
    """Store `entry` under `key` in the cache's JSON table `file_name` (other keys kept). A cache that cannot be
    written (a read-only home, a full disk) is said once; the caller's answer stands for this process."""
    path = cache_root() / file_name
    try:
        path = cache_dir() / file_name
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    table = table if isinstance(table, dict) else {}
    table[key] = entry
    try:
        write_atomically(path, json.dumps(table, indent=1))
    except OSError as error:
        warn_once(f"turbotrain: cannot write the cache {path} ({error}); measured choices are made again by each "
                  "process: set TURBOTRAIN_CACHE to a writable folder")  # fmt: skip


def device_name(device) -> str:
    """What a measured choice is valid for: CUDA's device name, or the device type and this machine's processor."""
    if device.type == "cuda":
        import torch

        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"{device.type}:{platform.processor() or platform.machine()}"
