"""Write an inference model with the trained weights: the eval graph cut at `logits`, the trainable
inputs turned into initializers holding the module's current values. Uses the `onnx` package (numpy
and protobuf only, no torch) besides onnxruntime."""

from __future__ import annotations

from pathlib import Path

from turbotrain.ondevice import manifest as layout
from turbotrain.ondevice.module import Module

INFERENCE_INPUTS = ("input_ids", "attention_mask")


def export_model_for_inferencing(module: Module, path: str | Path, output_names=("logits",)) -> Path:
    try:
        import onnx
        from onnx import numpy_helper
        from onnx.utils import Extractor
    except ImportError as error:
        raise ImportError("exporting an inference model needs the onnx package: pip install onnx") from error
    trainable = module.manifest.trainable
    model = onnx.load(str(module.directory / layout.EVAL_GRAPH))
    sub = Extractor(model).extract_model([*trainable, *INFERENCE_INPUTS], list(output_names))
    kept = [i for i in sub.graph.input if i.name not in set(trainable)]
    del sub.graph.input[:]
    sub.graph.input.extend(kept)
    sub.graph.initializer.extend(numpy_helper.from_array(module.params[n], n) for n in trainable)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(sub, str(path))
    return path
