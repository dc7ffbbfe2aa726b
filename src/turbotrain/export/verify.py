"""Check an exported ONNX model against torch on fresh random inputs of several shapes.

Reports the largest absolute difference of the logits over every shape, at real (unpadded) positions
for per-token tasks. A difference above the tolerance fails the export: a model that deploys must
compute what was trained.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from turbotrain.export.task_outputs import INPUT_NAMES, LogitsModule, exported_task, sample_inputs
from turbotrain.modeling import max_positions

# Odd on purpose: 1 x 1, a prime length, and a longer padded batch (capped at the model's positions).
VERIFY_SHAPES = ((1, 1), (3, 37), (2, 64))


@dataclass
class Verification:
    path: str
    tolerance: float
    max_abs_diff: float = 0.0
    per_shape: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= self.tolerance

    def summary(self) -> str:
        shapes = ", ".join(f"{s}: {d:.2e}" for s, d in self.per_shape.items())
        verdict = "ok" if self.ok else "FAILED"
        return (
            f"{self.path}: max |onnxruntime - torch| = {self.max_abs_diff:.2e} (tolerance {self.tolerance:.0e}, "
            f"{verdict}; {shapes})"
        )


class VerificationError(RuntimeError):
    pass


def verify_onnx(
    model: torch.nn.Module,
    path: str,
    tolerance: float,
    shapes=VERIFY_SHAPES,
    providers: tuple[str, ...] = ("CPUExecutionProvider",),
) -> Verification:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=list(providers))
    module = LogitsModule(model).eval()
    per_token = exported_task(model).labels_per_token
    result = Verification(str(path), tolerance)
    for seed, (batch, length) in enumerate(shapes):
        length = min(length, max_positions(model))
        inputs = sample_inputs(model, batch, length, seed=seed)
        with torch.no_grad():
            expected = module(*inputs).float().numpy()
        got = session.run(None, {n: t.numpy() for n, t in zip(INPUT_NAMES, inputs)})[0].astype(np.float32)
        diff = np.abs(got - expected)
        if per_token:
            diff = diff[inputs[1].numpy().astype(bool)]
        result.per_shape[f"{batch}x{length}"] = float(diff.max())
    result.max_abs_diff = max(result.per_shape.values())
    return result
