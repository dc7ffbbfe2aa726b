"""Train and evaluate from exported artifacts with ONNX Runtime and numpy (no torch).

`Module.train_step(batch)` runs the training graph (forward, loss, backward) and adds the gradients
to `module.grads` (so several calls accumulate, as in torch); `eval_step(batch)` runs the eval graph
and returns (loss, logits). A batch is a dict of numpy arrays: `input_ids` and `attention_mask`
(batch x sequence) and `labels` (batch x sequence for per-token tasks, batch for classification),
checked against the manifest first (batch.py: dtypes, shapes, id and label ranges).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from turbotrain.ondevice import manifest as layout
from turbotrain.ondevice.batch import check_batch
from turbotrain.ondevice.checkpoint import Checkpoint

DEFAULT_PROVIDERS = ("CPUExecutionProvider",)


def _session(path: Path, providers, session_options=None):
    try:
        import onnxruntime as ort
    except ImportError as error:
        raise ImportError("turbotrain.ondevice needs onnxruntime: pip install onnxruntime numpy") from error
    options = session_options or ort.SessionOptions()
    return ort.InferenceSession(str(path), sess_options=options, providers=list(providers))


class Module:
    """The model being fine-tuned: trainable parameters live in `checkpoint.params` (numpy)."""

    def __init__(
        self,
        artifacts_dir: str | Path,
        checkpoint: Checkpoint | None = None,
        providers=DEFAULT_PROVIDERS,
        session_options=None,
    ):
        self.directory = Path(artifacts_dir)
        self.manifest = layout.Manifest.load(self.directory)
        self.checkpoint = checkpoint or Checkpoint.load(self.directory / layout.CHECKPOINT)
        missing = set(self.manifest.trainable) - set(self.checkpoint.params)
        if missing:
            raise ValueError(f"checkpoint lacks trainable parameters: {sorted(missing)[:5]}")
        self._training = _session(self.directory / layout.TRAINING_GRAPH, providers, session_options)
        self._eval = _session(self.directory / layout.EVAL_GRAPH, providers, session_options)
        self.grads: dict[str, np.ndarray] = {}

    @property
    def params(self) -> dict[str, np.ndarray]:
        return self.checkpoint.params

    def _feeds(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {**{n: self.params[n] for n in self.manifest.trainable}, **check_batch(self.manifest, batch)}

    def train_step(self, batch: Mapping[str, np.ndarray]) -> float:
        """Forward, loss and backward on one batch; gradients are added to `self.grads`. Returns the loss."""
        outputs = self._training.run(None, self._feeds(batch))
        for name, grad in zip(self.manifest.trainable, outputs[1:]):
            self.grads[name] = self.grads[name] + grad if name in self.grads else grad
        return float(outputs[0])

    def eval_step(self, batch: Mapping[str, np.ndarray]) -> tuple[float, np.ndarray]:
        loss, logits = self._eval.run(["loss", "logits"], self._feeds(batch))
        return float(loss), logits

    def zero_grad(self) -> None:
        self.grads = {}

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        return self.checkpoint.save(path or self.directory / layout.CHECKPOINT)
