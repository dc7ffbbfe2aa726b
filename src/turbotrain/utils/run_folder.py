"""Never overwrite a run: a command that writes a result folder refuses one that holds an earlier run's results.

Every command that writes a run (`turbotrain pretrain`, `bench --out`, `export`, `bench-ondevice --out`,
`profile-ort --out`) declares a `RunFolder`: the top-level names that mark its results (weights, checkpoints,
its report files) and how the user names the folder. Before any work, `claim(folder)` lists the folder's
top-level names (nothing is opened, created or touched):

* new, empty, or holding none of the marks: the command goes on (None);
* holding some, no flag: ValueError, one line naming the folder, what it holds (up to four names) and the
  flags: `--resume` where the command has it (pretrain), `--overwrite`; the CLI prints it as
  `turbotrain <cmd>: error: ...` and exits 2, every file as it was;
* with `resume=True`: None (the run continues, as before);
* with `overwrite=True`: the one line to print, naming what is there and what the command replaces.

What a command does after an allowed claim is its own (pretrain trains into the folder as it always did;
export replaces the folder whole). The library calls underneath the commands that users call from Python
(`Trainer`, `export_onnx`, `save_pretrained`) keep their own semantics: stock's, which write into any folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

# what Transformers writes as a model's weights (checkpoint_weights.py: the forms) and a run's checkpoints
WEIGHTS = ("model.safetensors", "model-*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin")
WEIGHTS += ("pytorch_model.bin.index.json", "adapter_model.safetensors", "adapter_model.bin", "*.onnx")
CHECKPOINTS = ("checkpoint-*", "incomplete-checkpoint-*", "damaged-checkpoint-*")  # checkpoints.py sets aside
SHOWN = 4  # names shown in the message; the rest counted


@dataclass(frozen=True)
class RunFolder:
    """What one command's finished or started run leaves: `marks` (glob patterns of top-level names)."""

    what: str  # "a run", "an export": what the marks say the folder holds
    marks: tuple[str, ...]
    folder_flag: str  # how the user names the folder: "--output-dir", "--out", "OUT_DIR"
    replaces: str  # what --overwrite does to it, for the one line said then
    resumable: bool = False  # the command has --resume

    def held(self, folder: str | Path) -> list[str]:
        """The names in `folder` that mark an earlier run, files first, in natural order (`checkpoint-2` before
        `checkpoint-10`); [] for a new or empty folder, or a file."""
        folder = Path(folder)
        if not folder.is_dir():
            return []
        found = [p for p in folder.iterdir() if any(fnmatchcase(p.name, m) for m in self.marks)]
        return [p.name for p in sorted(found, key=_order)]

    def claim(self, folder: str | Path, overwrite: bool = False, resume: bool = False) -> str | None:
        """None to go on quietly, the line to print for `overwrite`, or a one-line ValueError (see the module)."""
        found = self.held(folder)
        if not found or (resume and self.resumable):
            return None
        names = ", ".join(found[:SHOWN]) + (f" and {len(found) - SHOWN} more" if len(found) > SHOWN else "")
        if overwrite:
            return f"--overwrite: {folder} holds {self.what} ({names}); {self.replaces}"
        flags = (
            "--resume to continue it or --overwrite to replace it" if self.resumable else "--overwrite to replace it"
        )
        raise ValueError(
            f"{folder} already holds {self.what} ({names}); add {flags}, or choose another {self.folder_flag}"
        )


def _order(path: Path) -> tuple:
    return path.is_dir(), [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]
