"""`scatter_add_for_index_put` on several index tensors: the backward of nearest upsampling (integer and
fractional scales, 1-d and 2-d) equals torch's, in the rewritten FX graph and exported to ONNX Runtime;
forms it cannot rewrite are refused with a reason."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from turbotrain.export.graph_rewrites import scatter_add_for_index_put
from turbotrain.export.onnx_graph import GraphModule, export_module, save_onnx, trace_aten

aten = torch.ops.aten


def upsample_grad(scale):
    def grad(x, upstream):
        x = x.requires_grad_(True)
        out = F.interpolate(x, scale_factor=scale, mode="nearest")
        return torch.autograd.grad((out * upstream).sum(), x)[0]

    return grad


def inputs(shape, scale, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator)
    out = F.interpolate(x, scale_factor=scale, mode="nearest")
    return x, torch.randn(out.shape, generator=generator)


def index_puts(graph) -> int:
    return sum(node.target is aten.index_put.default for node in graph.graph.nodes)


UPSAMPLES = {"2d-x2": ((3, 4, 5, 7), 2.0), "2d-x1.5": ((3, 4, 5, 7), 1.5), "1d-x3": ((2, 3, 11), 3.0)}


@pytest.mark.parametrize("name", sorted(UPSAMPLES))
def test_upsample_backward_becomes_scatter_add_with_torch_numbers(name):
    shape, scale = UPSAMPLES[name]
    x, upstream = inputs(shape, scale)
    graph = trace_aten(upsample_grad(scale), (x, upstream))
    assert index_puts(graph) == 1
    assert scatter_add_for_index_put(graph) == []
    assert index_puts(graph) == 0
    x2, upstream2 = inputs(shape, scale, seed=1)
    torch.testing.assert_close(graph(x2, upstream2), upsample_grad(scale)(x2, upstream2), rtol=1e-6, atol=1e-6)


@pytest.mark.requires_onnx
def test_upsample_backward_is_exact_in_onnxruntime(tmp_path):
    import onnxruntime as ort

    x, upstream = inputs((3, 4, 5, 7), 2.0)
    graph = trace_aten(upsample_grad(2.0), (x, upstream))
    assert scatter_add_for_index_put(graph) == []
    proto = export_module(GraphModule(graph, {}), (x, upstream), ["x", "upstream"], ["grad"])
    session = ort.InferenceSession(str(save_onnx(proto, tmp_path / "g.onnx")), providers=["CPUExecutionProvider"])
    (grad,) = session.run(None, {"x": x.numpy(), "upstream": upstream.numpy()})
    np.testing.assert_allclose(grad, upsample_grad(2.0)(x.clone(), upstream).numpy(), rtol=1e-5, atol=1e-6)


def test_index_tensors_apart_are_refused():
    def grad(x, upstream):
        x = x.requires_grad_(True)
        rows, columns = torch.tensor([0, 2, 2]), torch.tensor([1, 1, 0])
        return torch.autograd.grad((x[rows, :, columns] * upstream).sum(), x)[0]

    graph = trace_aten(grad, (torch.randn(3, 4, 2), torch.randn(3, 4)))
    (reason,) = scatter_add_for_index_put(graph)
    assert "index tensors [0, 2] apart" in reason
