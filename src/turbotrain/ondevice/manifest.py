"""The artifacts directory that `turbotrain.export_training_artifacts` writes and `turbotrain.ondevice` reads.

    manifest.json            this file's schema: graphs, inputs, trainable parameters, optimizer settings
    training.onnx            (trainable params..., batch...) -> (loss, grad.<param>...)   forward+loss+backward
    eval.onnx                (trainable params..., batch...) -> (loss, logits)             no dropout
    optimizer.onnx           (learning_rate, step, params..., grads..., exp_avg..., exp_avg_sq...)
                             -> (params..., exp_avg..., exp_avg_sq...)                    one AdamW step
    checkpoint.safetensors   param/<name>, exp_avg/<name>, exp_avg_sq/<name>; metadata: step, learning_rate

Frozen parameters are initializers inside the graphs; only trainable ones are inputs. Batch inputs
have dynamic batch and sequence axes. No torch here: this module is imported on devices without it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = "turbotrain-ondevice/1"
MANIFEST = "manifest.json"
TRAINING_GRAPH = "training.onnx"
EVAL_GRAPH = "eval.onnx"
OPTIMIZER_GRAPH = "optimizer.onnx"
CHECKPOINT = "checkpoint.safetensors"
GRAD_PREFIX = "grad."
STATE_KEYS = ("param", "exp_avg", "exp_avg_sq")


@dataclass
class OptimizerSpec:
    name: str = "adamw"
    learning_rate: float = 5e-5
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: dict[str, float] = field(default_factory=dict)


@dataclass
class Manifest:
    task: str
    model_class: str
    batch_inputs: dict[str, dict]          # name -> {"dtype": ..., "axes": [...]}
    trainable: list[str]
    shapes: dict[str, list[int]]
    optimizer: OptimizerSpec
    loss: str = "model"
    versions: dict[str, str] = field(default_factory=dict)
    format: str = FORMAT

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / MANIFEST
        data = {**self.__dict__, "optimizer": {**self.optimizer.__dict__, "betas": list(self.optimizer.betas)}}
        path.write_text(json.dumps(data, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | Path) -> Manifest:
        path = Path(directory) / MANIFEST
        if not path.is_file():
            raise FileNotFoundError(f"{directory} has no {MANIFEST}: not a turbotrain training-artifacts directory")
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"{path}: format {data.get('format')!r}, this runtime reads {FORMAT!r}")
        optimizer = data.pop("optimizer")
        optimizer["betas"] = tuple(optimizer["betas"])
        return cls(**data, optimizer=OptimizerSpec(**optimizer))
