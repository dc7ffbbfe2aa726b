"""Rewrites the exporter applies to traced graphs so that ONNX Runtime computes what torch computes.

`scatter_add_for_index_put`: `index_put(x, indices, v, accumulate=True)` exports to ONNX
ScatterND(reduction="add"), whose ONNX Runtime CPU kernel loses updates when indices repeat (measured
with onnxruntime 1.32: off by 30 on sums of ~140, 2,048 updates into 2 rows; the test pins it), so it
becomes `scatter_add` (ScatterElements, correct). One index tensor on dim 0 (the embedding backward):
scatter_add along dim 0. Several adjacent index tensors after leading full slices, `x[:, :, i, j]` (the
backward of nearest upsampling, `aten.index` with [None, None, rows, columns]): the indexed axes are
flattened into one, the indices into one linear index (`i * W + j`, negatives wrapped first), and the
scatter_add runs along that axis. Exact: the same values summed into the same places, in another order.
Forms it cannot rewrite (None between index tensors, boolean masks) are returned as reasons: the caller
must not run such a graph in ONNX Runtime.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule

aten = torch.ops.aten


def scatter_add_for_index_put(graph: GraphModule) -> list[str]:
    """Rewrite accumulating index_put into scatter_add (see the module docstring); return what it could not."""
    refused = []
    for node in list(graph.graph.nodes):
        if node.target is not aten.index_put.default or not (len(node.args) > 3 and node.args[3]):
            continue
        x, indices, values = node.args[:3]
        reason = _refusal(x, indices, values)
        if reason:
            refused.append(f"index_put(accumulate=True) with {reason} (ONNX Runtime's ScatterND loses updates)")
            continue
        with graph.graph.inserting_before(node):
            scattered = _scatter_add(graph.graph, x, list(indices), values)
        scattered.meta.update(node.meta)
        node.replace_all_uses_with(scattered)
        graph.graph.erase_node(node)
    graph.recompile()
    return refused


def _val(node):
    return getattr(node, "meta", {}).get("val")


def _refusal(x, indices, values) -> str | None:
    given = [i for i, index in enumerate(indices) if index is not None]
    if not given:
        return "no index tensor"
    if given != list(range(given[0], given[-1] + 1)):
        return f"index tensors {given} apart"
    if _val(x) is None or _val(values) is None or any(_val(indices[i]) is None for i in given):
        return "tensors of unknown shape"
    if any(_val(indices[i]).dtype in (torch.bool, torch.uint8) for i in given):
        return "a boolean mask"
    if _val(values).dim() != _val(x).dim() - len(given) + _broadcast_rank(indices, given):
        return "broadcast values"
    return None


def _broadcast_rank(indices, given) -> int:
    return max(_val(indices[i]).dim() for i in given)


def _scatter_add(graph, x, indices, values):
    """x[:lead], indexed axes [a, b, ...] -> [a * b * ...], rest; index -> linear; scatter_add along it."""
    call = graph.call_function
    shape = _val(x).shape
    lead = next(i for i, index in enumerate(indices) if index is not None)
    count = sum(index is not None for index in indices)
    sizes = [d if isinstance(d, int) else call(aten.sym_size.int, (x, i)) for i, d in enumerate(shape)]
    linear, flat = None, 1
    for axis in range(lead, lead + count):  # Horner: (i * W + j) * ... with each index wrapped
        index, size = indices[axis], sizes[axis]
        if count > 1:
            wrapped = call(aten.add.Tensor, (index, size))
            index = call(aten.where.self, (call(aten.lt.Scalar, (index, 0)), wrapped, index))
        if linear is not None:
            index = call(aten.add.Tensor, (call(aten.mul.Tensor, (linear, size)), index))
        linear = index
        both_ints = isinstance(flat, int) and isinstance(size, int)
        flat = flat * size if both_ints else call(operator.mul, (flat, size))  # the indexed axes' length
    before, after = sizes[:lead], sizes[lead + count :]
    flat_x = call(aten.reshape.default, (x, [*before, flat, *after])) if count > 1 else x
    flat_values = call(aten.reshape.default, (values, [*before, -1, *after]))  # [*before, K, *after]
    spread = call(aten.reshape.default, (linear, [*[1] * lead, -1, *[1] * len(after)]))
    spread = call(aten.expand.default, (spread, [*before, -1, *after]))
    scattered = call(aten.scatter_add.default, (flat_x, lead, spread, flat_values))
    return call(aten.reshape.default, (scattered, sizes)) if count > 1 else scattered
