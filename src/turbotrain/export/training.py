"""On-device training artifacts: the graphs and checkpoint that `turbotrain.ondevice` trains from.

`export_training_artifacts(model, out_dir, trainable=["classifier."])` writes the directory described
in `turbotrain/ondevice/manifest.py`. The training graph is the model's own forward and loss (the loss
it computes from `labels`, or a `loss(logits, labels)` you pass) followed by the backward that
torch's autograd records, traced to core ATen ops and exported through the one exporter
(`onnx_graph.py`); it returns the loss and the gradient of every trainable parameter. Frozen
parameters are constants in the graphs, so the device neither stores their gradients nor their
optimizer state. Exact: the graphs compute torch's loss, gradients and AdamW update to float rounding
(tests: 20 on-device steps equal torch's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.func import functional_call

from turbotrain.export.adamw_graph import AdamWStep, optimizer_io_names
from turbotrain.export.graph_rewrites import scatter_add_for_index_put
from turbotrain.export.onnx_graph import ExportError, GraphModule, export_module, save_onnx, trace_aten
from turbotrain.export.task_outputs import DYNAMIC_AXES, INPUT_NAMES, exported_task, model_kwargs, sample_inputs
from turbotrain.modeling import SEQUENCE_CLASSIFICATION, max_positions, num_classes, vocab_size
from turbotrain.ondevice import manifest as layout
from turbotrain.ondevice.checkpoint import Checkpoint
from turbotrain.utils.imports import require

Trainable = Sequence[str] | Callable[[str], bool] | None
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class TrainingArtifacts:
    directory: Path
    manifest: layout.Manifest

    def sizes(self) -> dict[str, int]:
        """Bytes of each file in the directory."""
        return {p.name: p.stat().st_size for p in sorted(self.directory.iterdir()) if p.is_file()}


def select_trainable(model: torch.nn.Module, trainable: Trainable) -> list[str]:
    """Names of the parameters to train: all (None), those starting with a given prefix, or a predicate's."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    if trainable is None:
        chosen = names
    elif callable(trainable):
        chosen = [n for n in names if trainable(n)]
    else:
        chosen = [n for n in names if any(n.startswith(prefix) for prefix in trainable)]
    if not chosen:
        raise ValueError(
            f"no parameter of {type(model).__name__} matches trainable={trainable!r}; "
            f"parameter names start like: {sorted({n.split('.')[0] for n in names})}"
        )
    return chosen


def _label_spec(model: torch.nn.Module) -> tuple[dict[int, str], torch.dtype]:
    task = exported_task(model)
    if task.name == SEQUENCE_CLASSIFICATION and getattr(model.config, "num_labels", 2) == 1:
        raise ValueError("regression heads (num_labels=1) are not supported on device; use num_labels >= 2")
    return (dict(task.logits_axes) if task.labels_per_token else {0: "batch"}), torch.long


def _sample_batch(model: torch.nn.Module) -> tuple[torch.Tensor, ...]:
    input_ids, attention_mask = sample_inputs(model, batch=2, length=16)
    axes, dtype = _label_spec(model)
    labels = torch.randint(
        0,
        num_classes(model),
        tuple(input_ids.shape[: len(axes)]),
        dtype=dtype,
        generator=torch.Generator().manual_seed(1),
    )
    return input_ids, attention_mask, labels


class _StepFunctions:
    """The functions traced into the training and eval graphs, with frozen state as trailing inputs."""

    def __init__(self, model: torch.nn.Module, trainable: list[str], loss: LossFn | None):
        self.model, self.trainable, self.loss = model, trainable, loss
        state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        self.frozen = {n: t.detach() for n, t in state.items() if n not in set(trainable)}
        self.kwargs = model_kwargs(model)

    def _loss_and_logits(self, params, frozen, input_ids, attention_mask, labels):
        state = {**dict(zip(self.frozen, frozen)), **dict(zip(self.trainable, params))}
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, **self.kwargs}
        if self.loss is None:
            loss, logits = functional_call(self.model, state, (), {**kwargs, "labels": labels})[:2]
        else:
            logits = functional_call(self.model, state, (), kwargs)[0]
            loss = self.loss(logits, labels)
        return loss, logits

    def split(self, inputs):
        n = len(self.trainable)
        return list(inputs[:n]), inputs[n : n + 3], inputs[n + 3 :]

    def training(self, *inputs):
        params, batch, frozen = self.split(inputs)
        params = [p.requires_grad_(True) for p in params]
        loss, _ = self._loss_and_logits(params, frozen, *batch)
        return (loss, *torch.autograd.grad(loss, params))

    def evaluation(self, *inputs):
        params, batch, frozen = self.split(inputs)
        return self._loss_and_logits(params, frozen, *batch)


def _export_graph(fn, steps: _StepFunctions, params, batch, output_names, path: Path, label_axes) -> None:
    graph = trace_aten(fn, (*params, *batch, *steps.frozen.values()))
    refused = scatter_add_for_index_put(graph)
    if refused:
        raise ExportError(f"cannot export a training graph that ONNX Runtime computes correctly: {refused[0]}")
    input_names = [*steps.trainable, *INPUT_NAMES, "labels"]
    proto = export_module(
        GraphModule(graph, steps.frozen),
        (*params, *batch),
        input_names,
        output_names,
        {**DYNAMIC_AXES, "labels": label_axes},
        max_sizes={"sequence": max_positions(steps.model)},
    )
    save_onnx(proto, path)


def _weight_decay(model: torch.nn.Module, trainable: list[str], weight_decay: float) -> dict[str, float]:
    """Trainer's rule: no decay for biases and normalization weights."""
    from turbotrain.boundaries.hf_boundary import decay_parameter_names

    decayed = set(decay_parameter_names(model))
    return {n: (weight_decay if n in decayed else 0.0) for n in trainable}


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
    }


def export_training_artifacts(
    model: torch.nn.Module,
    out_dir: str | Path,
    trainable: Trainable = None,
    loss: str | LossFn = "model",
    optimizer: str = "adamw",
    learning_rate: float = 5e-5,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
) -> TrainingArtifacts:
    """Write training, eval and AdamW graphs, a checkpoint and a manifest for on-device fine-tuning.

    `trainable`: None (every parameter), parameter-name prefixes (e.g. ["classifier."]) or a predicate.
    `loss`: "model" (the model's own loss from `labels`) or a function `loss(logits, labels) -> scalar`.
    """
    require("onnxruntime", "on-device training artifacts")
    if optimizer != "adamw":
        raise ValueError(f"optimizer={optimizer!r}: on-device training supports 'adamw'")
    if not (loss == "model" or callable(loss)):
        raise ValueError("loss must be 'model' or a function loss(logits, labels) -> scalar tensor")
    model = model.float()
    names = select_trainable(model, trainable)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    steps = _StepFunctions(model, names, None if loss == "model" else loss)
    params = [dict(model.named_parameters())[n].detach().clone() for n in names]
    batch = _sample_batch(model)
    label_axes, label_dtype = _label_spec(model)

    was_training = model.training
    model.train()
    _export_graph(
        steps.training,
        steps,
        params,
        batch,
        ["loss", *(layout.GRAD_PREFIX + n for n in names)],
        out / layout.TRAINING_GRAPH,
        label_axes,
    )
    model.eval()
    _export_graph(steps.evaluation, steps, params, batch, ["loss", "logits"], out / layout.EVAL_GRAPH, label_axes)
    model.train(was_training)

    spec = layout.OptimizerSpec("adamw", learning_rate, tuple(betas), eps, _weight_decay(model, names, weight_decay))
    opt_inputs, opt_outputs = optimizer_io_names(names)
    # Distinct example tensors: torch.export merges inputs that are the same tensor object.
    state = [torch.zeros_like(p) for _ in range(3) for p in params]
    proto = export_module(
        AdamWStep(names, spec),
        (torch.tensor(learning_rate), torch.tensor(1.0), *params, *state),
        opt_inputs,
        opt_outputs,
    )
    save_onnx(proto, out / layout.OPTIMIZER_GRAPH)

    state = {n: p.numpy() for n, p in zip(names, params)}
    Checkpoint(
        state,
        {n: np.zeros_like(v) for n, v in state.items()},
        {n: np.zeros_like(v) for n, v in state.items()},
        step=0,
        learning_rate=learning_rate,
    ).save(out / layout.CHECKPOINT)
    batch_inputs = {
        n: {"dtype": "int64", "axes": [DYNAMIC_AXES[n][i] for i in sorted(DYNAMIC_AXES[n])]} for n in INPUT_NAMES
    }
    batch_inputs["labels"] = {
        "dtype": str(label_dtype).removeprefix("torch."),
        "axes": [label_axes[i] for i in sorted(label_axes)],
    }
    manifest = layout.Manifest(
        exported_task(model).name,
        type(model).__name__,
        batch_inputs,
        names,
        {n: list(p.shape) for n, p in zip(names, params)},
        spec,
        "model" if loss == "model" else getattr(loss, "__name__", "custom"),
        _versions(),
        limits={
            "vocab_size": vocab_size(model),
            "max_positions": max_positions(model),
            "label_classes": num_classes(model),
        },
    )
    manifest.save(out)
    return TrainingArtifacts(out, manifest)
