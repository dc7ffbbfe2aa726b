"""The one exporter's traps, each found once and pinned here: tiny constants, and the attention kernels
that have no ONNX translation. (Duck-shaped symbols, a batch of 2 fused with a 2-label head, are pinned
by the on-device test, whose head has 2 labels and whose batches are 2 to 4 rows.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.requires import lazy_module
from turbotrain.export.onnx_graph import GraphModule, export_module, save_onnx, trace_aten

ort = lazy_module("onnxruntime")
pytestmark = pytest.mark.requires_onnx


def run(proto, tmp_path, feeds):
    path = save_onnx(proto, tmp_path / "g.onnx")
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_tiny_constants_are_kept(tmp_path):
    class AddEps(torch.nn.Module):
        def forward(self, x):
            return torch.sqrt(x) + 1e-8

    proto = export_module(AddEps(), (torch.zeros(3),), ["x"], ["y"])
    (y,) = run(proto, tmp_path, {"x": np.zeros(3, np.float32)})
    np.testing.assert_allclose(y, 1e-8, rtol=1e-6)


def test_attention_backward_is_traced_through_the_math_kernel(tmp_path):
    def attention_grad(q):
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        return torch.autograd.grad(out.sum(), q)[0]

    q = torch.randn(2, 2, 7, 4, requires_grad=True)
    graph = trace_aten(lambda t: attention_grad(t.requires_grad_(True)), (q.detach(),))
    assert not any("flash" in str(node.target) for node in graph.graph.nodes)
    proto = export_module(GraphModule(graph, {}), (q.detach(),), ["q"], ["grad"], {"q": {2: "sequence"}})
    q11 = torch.randn(2, 2, 11, 4)
    (grad,) = run(proto, tmp_path, {"q": q11.numpy()})
    np.testing.assert_allclose(grad, attention_grad(q11.clone().requires_grad_(True)).numpy(), atol=1e-5)


def test_embedding_backward_with_repeated_ids_is_exact_in_onnxruntime(tmp_path):
    # index_put(accumulate=True) would export to ScatterND(add), whose ONNX Runtime CPU kernel loses
    # updates when ids repeat (off by tens here); the exporter's rewrite makes it ScatterElements.
    from turbotrain.export.graph_rewrites import scatter_add_for_index_put

    weight = torch.randn(2, 256)
    ids = (torch.arange(2048) % 3 == 0).long()

    def embedding_grad(w, upstream, ids):
        w = w.requires_grad_(True)
        return torch.autograd.grad((torch.nn.functional.embedding(ids, w) * upstream).sum(), w)[0]

    upstream = torch.randn(2048, 256)
    graph = trace_aten(embedding_grad, (weight, upstream, ids))
    assert scatter_add_for_index_put(graph) == []
    assert any(node.target is torch.ops.aten.scatter_add.default for node in graph.graph.nodes)
    proto = export_module(GraphModule(graph, {"ids": ids}), (weight, upstream), ["w", "upstream"], ["grad"])
    (grad,) = run(proto, tmp_path, {"w": weight.numpy(), "upstream": upstream.numpy()})
    expected = embedding_grad(weight.clone(), upstream, ids)
    np.testing.assert_allclose(grad, expected.numpy(), rtol=1e-5, atol=1e-3)
