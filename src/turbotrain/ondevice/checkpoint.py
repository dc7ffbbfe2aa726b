"""Trainable parameters and AdamW state as numpy arrays, saved as one safetensors file.

Keys: `param/<name>`, `exp_avg/<name>`, `exp_avg_sq/<name>`; metadata: `step` (optimizer steps taken)
and `learning_rate`. Saving writes a temporary file, flushes it to disk (fsync), renames it over the
checkpoint and flushes the directory, so a device that loses power mid-save keeps the previous
checkpoint whole. Non-finite values (NaN, inf) are never saved: the save raises and the file on
disk is kept.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file


@dataclass
class Checkpoint:
    params: dict[str, np.ndarray]
    exp_avg: dict[str, np.ndarray]
    exp_avg_sq: dict[str, np.ndarray]
    step: int = 0
    learning_rate: float = 5e-5

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        tensors = {
            f"{key}/{name}": np.ascontiguousarray(value)
            for key, table in (("param", self.params), ("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq))
            for name, value in table.items()
        }
        for key, value in tensors.items():
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                raise ValueError(
                    f"refusing to save {path}: {key} holds NaN or inf values (a non-finite learning "
                    f"rate or loss?); the checkpoint already on disk is kept"
                )
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        try:
            save_file(
                tensors, str(partial), metadata={"step": str(self.step), "learning_rate": repr(self.learning_rate)}
            )
            _fsync(partial)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
        _fsync(path.parent, directory=True)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Checkpoint:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no checkpoint at {path}")
        tables: dict[str, dict[str, np.ndarray]] = {"param": {}, "exp_avg": {}, "exp_avg_sq": {}}
        try:
            stored = load_file(str(path))
        except Exception as error:  # safetensors raises its own error type for a cut-off or garbled file
            raise ValueError(
                f"{path} is not a readable checkpoint ({error}); restore it from a copy or re-export the artifacts"
            ) from None
        for key, value in stored.items():
            table, _, name = key.partition("/")
            if table not in tables:
                raise ValueError(f"{path}: unexpected tensor {key!r}")
            tables[table][name] = value
        with safe_open(str(path), framework="numpy") as handle:
            metadata = handle.metadata() or {}
        return cls(
            tables["param"],
            tables["exp_avg"],
            tables["exp_avg_sq"],
            int(metadata.get("step", 0)),
            float(metadata.get("learning_rate", 5e-5)),
        )


def _fsync(path: Path, directory: bool = False) -> None:
    descriptor = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
