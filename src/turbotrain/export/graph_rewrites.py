"""Rewrites the exporter applies to traced graphs so that ONNX Runtime computes what torch computes.

`scatter_add_for_index_put`: `index_put(x, [i], v, accumulate=True)` (the embedding backward) exports to
ONNX ScatterND(reduction="add"), whose ONNX Runtime CPU kernel loses updates when indices repeat
(measured with onnxruntime 1.32: off by 30 on sums of ~140, 2,048 updates into 2 rows; the test pins
it), so it becomes `scatter_add` along dim 0 (ScatterElements, correct). Forms it cannot rewrite are
returned as reasons: the caller must not run such a graph in ONNX Runtime.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule


def scatter_add_for_index_put(graph: GraphModule) -> list[str]:
    """Rewrite accumulating index_put with one index tensor into scatter_add; return what it could not."""
    aten = torch.ops.aten
    refused = []
    for node in list(graph.graph.nodes):
        if node.target is not aten.index_put.default or not (len(node.args) > 3 and node.args[3]):
            continue
        x, indices, values = node.args[:3]
        shapes = [getattr(a, "meta", {}).get("val") for a in (x, values)]
        if len(indices) != 1 or indices[0] is None or any(v is None for v in shapes):
            refused.append(
                f"index_put(accumulate=True) with {len(indices)} index tensors (ONNX Runtime's ScatterND "
                "loses repeated updates)"
            )
            continue
        with graph.graph.inserting_before(node):
            rest = [
                d if isinstance(d, int) else graph.graph.call_function(aten.sym_size.int, (x, i + 1))
                for i, d in enumerate(shapes[0].shape[1:])
            ]
            flat_index = graph.graph.call_function(aten.reshape.default, (indices[0], [-1]))
            flat_values = graph.graph.call_function(aten.reshape.default, (values, [-1, *rest]))
            spread = flat_index
            for _ in rest:
                spread = graph.graph.call_function(aten.unsqueeze.default, (spread, -1))
            spread = graph.graph.call_function(aten.expand.default, (spread, [-1, *rest]))
            scattered = graph.graph.call_function(aten.scatter_add.default, (x, 0, spread, flat_values))
        scattered.meta.update(node.meta)
        node.replace_all_uses_with(scattered)
        graph.graph.erase_node(node)
    graph.recompile()
    return refused
