"""The onnxruntime backend on convolutions and nearest upsampling: a backward graph with
`convolution_backward` (1-d and 2-d, stride, padding, dilation, groups, with and without bias) and the
upsampling gradient (`index_put` with two index tensors) runs in ONNX Runtime, with no fallback, giving
eager's loss, input gradient and every parameter gradient (fp32, 1e-5 of each gradient's scale)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.parity import assert_same_relative_to_scale
from turbotrain.backends.onnxruntime import ort_compiler
from turbotrain.backends.ort_graph import STATS, OrtConfig

pytestmark = pytest.mark.requires_onnx


class ConvStack(nn.Module):
    """Odd shapes on purpose: Conv1d(stride 2, padding 1, dilation 2, groups 2, no bias), Conv1d with bias,
    nearest x2 upsampling, Conv2d((3, 2), stride (2, 1), dilation (2, 1), groups 2, no bias), Conv2d 3x3."""

    def __init__(self):
        super().__init__()
        self.odd1 = nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2, bias=False)
        self.plain1 = nn.Conv1d(6, 4, 3, padding=1)
        self.odd2 = nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(2, 1), groups=2, bias=False)
        self.plain2 = nn.Conv2d(6, 3, 3, padding=1)

    def forward(self, audio, image):
        a = self.plain1(F.gelu(self.odd1(audio)))  # [3, 4, 37] -> [3, 6, 18] -> [3, 4, 18]
        b = F.interpolate(image, scale_factor=2.0, mode="nearest")  # [3, 4, 5, 7] -> [3, 4, 10, 14]
        b = self.plain2(F.gelu(self.odd2(b)))  # -> [3, 6, 4, 13] -> [3, 3, 4, 13]
        return a.square().mean() + (b * torch.linspace(-1, 2, b.shape[-1])).sum()


def step(model, audio, image):
    model.zero_grad(set_to_none=True)
    audio, image = audio.clone().requires_grad_(True), image.clone().requires_grad_(True)
    loss = model(audio, image)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return loss.detach(), {**grads, "audio": audio.grad, "image": image.grad}


def test_convolution_and_upsampling_backward_run_in_onnxruntime_with_eager_numbers():
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = ConvStack()
    model = copy.deepcopy(eager)
    model.compile(backend=ort_compiler(OrtConfig(cache_dir=None)))
    fallbacks, exports = len(STATS.fallbacks), STATS.exports
    for seed in range(2):  # the first call exports and checks, the second is the steady state
        generator = torch.Generator().manual_seed(seed)
        audio, image = torch.randn(3, 4, 37, generator=generator), torch.randn(3, 4, 5, 7, generator=generator)
        assert_same_relative_to_scale(step(eager, audio, image), step(model, audio, image), rtol=1e-5)
    assert STATS.exports == exports + 2, "one forward and one backward graph"
    assert STATS.fallbacks[fallbacks:] == [], "every graph must run in ONNX Runtime"
    torch._dynamo.reset()
