"""ONNX export of a diffusion UNet for inference, verified against torch.

`export_unet_onnx(unet, "unet.onnx")` exports `UNet2DConditionModel.forward(sample, timestep,
encoder_hidden_states) -> noise prediction` through the one exporter (`onnx_graph.py`), with the batch
axis dynamic (sample [B, C, H, W] with H and W fixed at the config's `sample_size`, timestep [B] int64,
encoder_hidden_states [B, L, D], L fixed), then runs the file in ONNX Runtime and in torch on fresh
random inputs of batch 1 and 3 and fails (`VerificationError`) if the largest difference passes
`tolerance` (default 1e-4 of the prediction's scale). Needs the `onnx` and `diffusion` extras.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from turbotrain.export.onnx_graph import export_module, save_onnx
from turbotrain.export.verify import VerificationError
from turbotrain.utils.imports import require

INPUTS = ("sample", "timestep", "encoder_hidden_states")
DYNAMIC = {name: {0: "batch"} for name in INPUTS}


class _UNetPrediction(torch.nn.Module):
    def __init__(self, unet: torch.nn.Module):
        super().__init__()
        self.unet = unet

    def forward(self, *inputs):  # (sample, timestep, encoder_hidden_states): the exporter's positional contract
        return self.unet(*inputs, return_dict=False)[0]


@dataclass
class UNetExport:
    path: Path
    max_rel_diff: float


def unet_inputs(unet: torch.nn.Module, batch: int, text_tokens: int, seed: int) -> tuple[torch.Tensor, ...]:
    config = unet.config
    generator = torch.Generator().manual_seed(seed)
    size = int(config.sample_size)
    sample = torch.randn(batch, int(config.in_channels), size, size, generator=generator)
    timestep = torch.randint(0, 1000, (batch,), generator=generator)
    text = torch.randn(batch, text_tokens, int(config.cross_attention_dim), generator=generator)
    return sample, timestep, text


def export_unet_onnx(
    unet: torch.nn.Module, path: str | Path, text_tokens: int = 8, tolerance: float = 1e-4
) -> UNetExport:
    require("onnxruntime", "ONNX export")
    import onnxruntime as ort

    module = _UNetPrediction(unet).eval()
    with torch.no_grad():
        proto = export_module(
            module, unet_inputs(unet, 2, text_tokens, seed=0), INPUTS, ("noise_pred",), dynamic_axes=DYNAMIC
        )
    path = save_onnx(proto, path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch, seed in ((1, 1), (3, 2)):
        inputs = unet_inputs(unet, batch, text_tokens, seed)
        with torch.no_grad():
            expected = module(*inputs).numpy()
        got = session.run(None, {n: t.numpy() for n, t in zip(INPUTS, inputs)})[0]
        worst = max(worst, float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-12)))
    if worst > tolerance:
        raise VerificationError(
            f"{path}: ONNX Runtime differs from torch by {worst:.3g} of the prediction's scale (tolerance {tolerance})"
        )
    return UNetExport(path, worst)
