"""The forms a checkpoint's model weights take, and a structural check of each file that catches a cut-off write.

Trainer writes a checkpoint's weights, and a user may legitimately rewrite them afterwards, as any of:

* one file: `model.safetensors`, `pytorch_model.bin` (`save_safetensors=False`), `adapter_model.safetensors` or
  `adapter_model.bin` (PEFT: the adapter only; several adapters get one subfolder each);
* shards and their index: `model-00001-of-00003.safetensors`, ... and `model.safetensors.index.json` (also
  `pytorch_model-...bin` with `pytorch_model.bin.index.json`), written so by Trainer for a large model, or by a
  user resharding a checkpoint after the fact (`save_pretrained(..., max_shard_size=...)`), which stock resumes from.

`is_weights(name)` says whether a file is one of these; `has_a_form(directory)` whether a directory holds one
complete form now (an index counts once every shard it names is there; a lone shard does not); `problem(path)`
checks a file's structure without any recorded checksum, so it also guards checkpoints stock Trainer wrote
(no manifest) and weights rewritten after turbotrain's commit:

* safetensors: the file must be exactly 8 + header + the data its tensors' offsets span (a cut file is shorter,
  a header cut off does not parse);
* torch's zip format (`torch.save` since 1.6): the zip's end-of-directory record must be there (a cut file
  loses it). The legacy pickle format has no such record and is not checked.

Cost: the safetensors header (a few KB) and the zip's last bytes are read; no tensor data.
"""

from __future__ import annotations

import json
import re
import struct
import zipfile
from pathlib import Path

_WEIGHTS = re.compile(r"^(model|pytorch_model|adapter_model)(-\d+-of-\d+)?\.(safetensors|bin)(\.index\.json)?$")
SINGLE_FILES = ("model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin")


def is_weights(name: str) -> bool:
    """Whether the file `name` (a path inside a checkpoint) holds model weights or their shard index."""
    return bool(_WEIGHTS.match(Path(name).name))


def has_a_form(directory: Path) -> bool:
    """Whether `directory` holds one complete form of weights: a single file, or an index and all its shards."""
    if any((directory / name).is_file() for name in SINGLE_FILES):
        return True
    for index in directory.glob("*.index.json"):
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if shards and all((directory / shard).is_file() for shard in shards):
            return True
    return False


def problem(path: Path) -> str | None:
    """Why the weights file `path` is not whole (a phrase naming it), or None."""
    if path.suffix == ".safetensors":
        return _safetensors_problem(path)
    if path.suffix == ".bin":
        return _zip_problem(path)
    return None


def problem_in(folder: Path) -> str | None:
    """The first weights file under `folder` that is not whole, or None."""
    for path in sorted(folder.rglob("*")):
        if path.is_file() and is_weights(path.name):
            found = problem(path)
            if found is not None:
                return f"{path.relative_to(folder).as_posix()} {found}"
    return None


def _safetensors_problem(path: Path) -> str | None:
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            (header_bytes,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(header_bytes)) if 8 + header_bytes <= size else None
    except (OSError, ValueError, struct.error) as error:
        return f"is not a whole safetensors file ({type(error).__name__}: {error})"
    if not isinstance(header, dict):
        return f"is {size} bytes, shorter than its safetensors header says (truncated)"
    spans = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    expected = 8 + header_bytes + max(spans, default=0)
    if size != expected:
        return f"is {size} bytes, {expected} by its safetensors header (truncated or overwritten)"
    return None


def _zip_problem(path: Path) -> str | None:
    with open(path, "rb") as handle:
        is_zip_format = handle.read(2) == b"PK"
    if is_zip_format and not zipfile.is_zipfile(path):
        return "is a cut-off torch file (its zip directory is missing: truncated)"
    return None
