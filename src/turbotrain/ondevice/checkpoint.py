"""Trainable parameters and AdamW state as numpy arrays, saved as one safetensors file.

Keys: `param/<name>`, `exp_avg/<name>`, `exp_avg_sq/<name>`; metadata: `step` (optimizer steps taken)
and `learning_rate`. Saving writes a temporary file and renames it, so a device that loses power
mid-save keeps the previous checkpoint whole.
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
        tensors = {f"{key}/{name}": np.ascontiguousarray(value)
                   for key, table in (("param", self.params), ("exp_avg", self.exp_avg),
                                      ("exp_avg_sq", self.exp_avg_sq))
                   for name, value in table.items()}
        partial = path.with_name(path.name + ".partial")
        save_file(tensors, str(partial), metadata={"step": str(self.step), "learning_rate": repr(self.learning_rate)})
        os.replace(partial, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Checkpoint:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no checkpoint at {path}")
        tables: dict[str, dict[str, np.ndarray]] = {"param": {}, "exp_avg": {}, "exp_avg_sq": {}}
        for key, value in load_file(str(path)).items():
            table, _, name = key.partition("/")
            if table not in tables:
                raise ValueError(f"{path}: unexpected tensor {key!r}")
            tables[table][name] = value
        with safe_open(str(path), framework="numpy") as handle:
            metadata = handle.metadata() or {}
        return cls(tables["param"], tables["exp_avg"], tables["exp_avg_sq"], int(metadata.get("step", 0)),
                   float(metadata.get("learning_rate", 5e-5)))
