"""`conv_backward.convolution_backward` against torch's own `aten.convolution_backward`: every output_mask,
1-d and 2-d, odd shapes with stride, padding, dilation, groups and no bias (eager, then exported and run in
ONNX Runtime), and the forms it leaves to the exporter's refusal."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from turbotrain.export.conv_backward import convolution_backward, training_decompositions

aten = torch.ops.aten

CASES = {  # input shape, C_out, kernel, stride, padding, dilation, groups, bias
    "1d-plain": ((3, 4, 37), 6, 3, 1, 0, 1, 1, True),
    "1d-whisper-stride2": ((3, 8, 32), 6, 3, 2, 1, 1, 1, True),
    "1d-odd": ((3, 4, 37), 6, 3, 2, 1, 2, 2, False),
    "2d-plain": ((3, 4, 9, 7), 6, 3, 1, 1, 1, 1, True),
    "2d-odd": ((3, 4, 11, 9), 6, (3, 2), (2, 1), (1, 0), (2, 1), 2, False),
    "2d-pointwise": ((2, 6, 5, 5), 3, 1, 1, 0, 1, 3, True),
}


def conv_case(name: str, seed: int = 0):
    shape, c_out, kernel, stride, padding, dilation, groups, bias = CASES[name]
    axes = len(shape) - 2
    per_axis = [v if isinstance(v, tuple) else (v,) * axes for v in (kernel, stride, padding, dilation)]
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator)
    w = torch.randn(c_out, shape[1] // groups, *per_axis[0], generator=generator)
    y = aten.convolution.default(x, w, None, *per_axis[1:], False, [0] * axes, groups)
    grad_y = torch.randn(y.shape, generator=generator)
    return grad_y, x, w, [c_out] if bias else None, *per_axis[1:], False, [0] * axes, groups


def assert_close_to_scale(got, expected, rtol=1e-5):
    scale = expected.abs().max().item()
    diff = (got - expected).abs().max().item()
    print(f"max |diff| {diff:.2e} at scale {scale:.2e}")
    assert got.shape == expected.shape and diff <= rtol * scale


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("mask", list(itertools.product([False, True], repeat=3)), ids=str)
def test_every_output_equals_torch(name, mask):
    args = conv_case(name)
    if args[3] is None and mask[2]:
        mask = (*mask[:2], False)
    got = convolution_backward(*args, list(mask))
    expected = aten.convolution_backward.default(*args, list(mask))
    for g, e, wanted in zip(got, expected, mask):
        assert (g is None) == (not wanted)
        if wanted:
            assert_close_to_scale(g, e)


def test_left_alone_forms_return_not_implemented():
    grad_y, x, w, *rest = conv_case("1d-plain")
    transposed = [*rest[:4], True, *rest[5:]]
    assert convolution_backward(grad_y, x, w, *transposed, [True, True, True]) is NotImplemented
    x3 = torch.randn(2, 4, 5, 5, 5)
    w3 = torch.randn(6, 4, 3, 3, 3)
    grad_y3 = torch.randn(2, 6, 3, 3, 3)
    three = (None, [1] * 3, [0] * 3, [1] * 3, False, [0] * 3, 1, [True, True, False])
    assert convolution_backward(grad_y3, x3, w3, *three) is NotImplemented


@pytest.mark.requires_onnx
@pytest.mark.parametrize("name", ["1d-whisper-stride2", "2d-odd"])  # ~1 min each on 2 busy cores
def test_traced_and_exported_gradients_match_torch_in_onnxruntime(name, tmp_path):
    import onnxruntime as ort

    from turbotrain.export.onnx_graph import GraphModule, export_module, save_onnx, trace_aten

    grad_y, x, w, bias, stride, padding, dilation, _, _, groups = conv_case(name)
    b = torch.randn(w.shape[0])  # a bias, used or not: every graph takes the same inputs

    def grads(x, w, b, grad_y):
        x, w, b = x.requires_grad_(True), w.requires_grad_(True), b.requires_grad_(True)
        conv = torch.nn.functional.conv1d if x.dim() == 3 else torch.nn.functional.conv2d
        out = conv(x, w, b if bias else None, stride, padding, dilation, groups)
        return torch.autograd.grad(out, (x, w, b) if bias else (x, w), grad_y)

    inputs = {"x": x, "w": w, "b": b, "grad_y": grad_y}
    graph = trace_aten(grads, tuple(inputs.values()))
    assert not any(node.target is aten.convolution_backward.default for node in graph.graph.nodes)
    names = ["grad_x", "grad_w", "grad_b"][: 3 if bias else 2]
    proto = export_module(GraphModule(graph, {}), tuple(inputs.values()), list(inputs), names)
    session = ort.InferenceSession(str(save_onnx(proto, tmp_path / "g.onnx")), providers=["CPUExecutionProvider"])
    feeds = {i.name: inputs[i.name].numpy() for i in session.get_inputs()}
    got = session.run(None, feeds)
    for g, e in zip(got, grads(*(t.clone() for t in inputs.values()))):
        assert_close_to_scale(torch.from_numpy(np.asarray(g)), e)


def test_the_table_is_core_aten_plus_convolution_backward():
    from torch._decomp import core_aten_decompositions

    table = training_decompositions()
    assert table[aten.convolution_backward.default] is convolution_backward
    assert set(table) - {aten.convolution_backward.default} == set(core_aten_decompositions())
