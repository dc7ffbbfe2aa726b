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
    batch_inputs: dict[str, dict]  # name -> {"dtype": ..., "axes": [...]}
    trainable: list[str]
    shapes: dict[str, list[int]]
    optimizer: OptimizerSpec
    loss: str = "model"
    versions: dict[str, str] = field(default_factory=dict)
    format: str = FORMAT
    # What a batch may hold: vocab_size (token ids), max_positions (sequence length), label_classes
    # (labels; -100 is ignored). Empty in manifests written before they were recorded.
    limits: dict[str, int] = field(default_factory=dict)

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
        data = _read_object(path)
        if data.get("format") != FORMAT:
            raise ValueError(f"{path}: format {data.get('format')!r}, this runtime reads {FORMAT!r}")
        _check_keys(path, data)
        optimizer = dict(data.pop("optimizer"))
        optimizer["betas"] = tuple(optimizer["betas"])
        return cls(**data, optimizer=OptimizerSpec(**optimizer))


REQUIRED = ("task", "model_class", "batch_inputs", "trainable", "shapes", "optimizer")
REQUIRED_OPTIMIZER = ("learning_rate", "betas", "eps")
FIX = "re-export the artifacts with turbotrain.export_training_artifacts"


def _read_object(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}); {FIX}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, found {type(data).__name__}; {FIX}")
    return data


def _check_keys(path: Path, data: dict) -> None:
    """Every key the runtime reads is there, with the right kind of value; no key it does not know."""
    known = set(Manifest.__dataclass_fields__)
    for key in data:
        if key not in known:
            raise ValueError(f"{path}: unknown key {key!r} (this runtime knows {sorted(known)}); {FIX}")
    _require(path, "", data, REQUIRED)
    if not isinstance(data["optimizer"], dict):
        raise ValueError(f"{path}: optimizer must be an object; {FIX}")
    _require(path, "optimizer ", data["optimizer"], REQUIRED_OPTIMIZER)
    unknown = set(data["optimizer"]) - set(OptimizerSpec.__dataclass_fields__)
    if unknown:
        raise ValueError(f"{path}: optimizer has unknown keys {sorted(unknown)}; {FIX}")
    if not isinstance(data["batch_inputs"], dict) or not isinstance(data["trainable"], list):
        raise ValueError(f"{path}: batch_inputs must be an object and trainable a list; {FIX}")
    for name, spec in data["batch_inputs"].items():
        if not isinstance(spec, dict):
            raise ValueError(f"{path}: batch_inputs.{name} must be an object with dtype and axes; {FIX}")
        _require(path, f"batch_inputs.{name} ", spec, ("dtype", "axes"))


def _require(path: Path, where: str, data: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        if key not in data:
            prefix = f"{path}: {where}lacks" if where else f"{path} lacks"
            raise ValueError(f"{prefix} {key!r}; {FIX}")
