"""The initial model every peer starts from, kept on disk instead of in the benchmark's memory.

Each peer trains its own copy of the same initial weights. Keeping that initial model resident beside the
peer's copy would add its whole size to every peer's peak memory (a Llama-3.2-1B shape: 4.9 GB of fp32
weights): the same for every peer, so ratios between peers would shrink toward 1 and no peak would be what a
user's own process, holding one model, sees. `SpilledModel` pickles the model once into a scratch file
(`torch.save`) and loads a fresh copy for each segment (`copy()`), which the page cache makes a memory
copy, not a disk read. A model that cannot be pickled (or finds no room in the scratch directory, the
system's temporary one unless given) stays in memory (`copy.deepcopy`), and `spilled` says so; the
report's memory figures then include it. `file` is the spilled model as a `ModelFile`: only its path, which a
segment in a process of its own (isolated.py) loads its copy from.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import torch
from torch import nn


class ModelFile:
    """A model saved with `torch.save`, by path only (picklable: it crosses into a child process)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def copy(self) -> nn.Module:
        return torch.load(self.path, weights_only=False)


class SpilledModel:
    def __init__(self, model: nn.Module, directory: str | None = None):
        self._scratch = tempfile.TemporaryDirectory(prefix="turbotrain-initial-", dir=directory)
        self.path = Path(self._scratch.name) / "model.pt"
        try:
            torch.save(model, self.path)
            self._resident = None
        except Exception:  # noqa: BLE001 - unpicklable, or no room on disk: keep it in memory, and say so
            self.path.unlink(missing_ok=True)
            self._resident = model

    @property
    def spilled(self) -> bool:
        return self._resident is None

    @property
    def file(self) -> ModelFile:
        if not self.spilled:
            raise RuntimeError("the initial model could not be pickled to a file: no process of its own can load it")
        return ModelFile(self.path)

    def copy(self) -> nn.Module:
        """A fresh copy of the initial model, sharing no tensor with any other copy."""
        if self._resident is not None:
            return copy.deepcopy(self._resident)
        return self.file.copy()

    def close(self) -> None:
        self._scratch.cleanup()


def fresh_copy(model: nn.Module | SpilledModel | ModelFile) -> nn.Module:
    """A peer's own copy of the initial model: `model` itself (deep-copied), or the runner's `SpilledModel` or
    `ModelFile` of it."""
    return model.copy() if isinstance(model, (SpilledModel, ModelFile)) else copy.deepcopy(model)
