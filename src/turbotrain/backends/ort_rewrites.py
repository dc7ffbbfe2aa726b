"""FX rewrites of an AOTAutograd graph before it is exported for ONNX Runtime. Each keeps the numbers.

- `constants_as_buffers`: tensor constants become registered buffers, which torch.export lifts.
- `masks_for_dropout`: `native_dropout(x, p)` -> `x * mask / (1 - p)` with `mask` a new graph input, drawn
  at run time by torch's own native_dropout (the same random stream as eager).
- `broadcast_copies`: `copy(dst, src)` with a smaller `src` (a scalar written into a row: the
  decoder-start column that seq2seq models' `shift_tokens_right` writes) -> `where(True, src, dst)` in
  dst's dtype, which broadcasts as `copy` does; the ONNX translation of `copy` keeps src's shape.
(The exporter's own rewrite, `export/graph_rewrites.py`, replaces accumulating index_put as well.)
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule


def constants_as_buffers(graph: GraphModule) -> None:
    """AOTAutograd keeps tensor constants as plain attributes; torch.export only lifts registered buffers."""
    for node in graph.graph.nodes:
        if node.op == "get_attr" and "." not in node.target:
            value = getattr(graph, node.target)
            if isinstance(value, torch.Tensor) and node.target not in dict(graph.named_buffers()):
                delattr(graph, node.target)
                graph.register_buffer(node.target, value, persistent=False)


def masks_for_dropout(graph: GraphModule) -> list[tuple[float, str]]:
    """Replace every `native_dropout(x, p, train)` by `x * mask * 1/(1-p)` with `mask` a new input."""
    masks = []
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    for node in list(graph.graph.nodes):
        if node.target is not torch.ops.aten.native_dropout.default:
            continue
        x, p = node.args[0], float(node.args[1])
        with graph.graph.inserting_after(placeholders[-1]):
            mask = graph.graph.placeholder(f"dropout_mask_{len(masks)}")
        mask.meta["val"] = torch.empty_like(x.meta["val"], dtype=torch.bool) if "val" in x.meta else None
        placeholders.append(mask)
        with graph.graph.inserting_before(node):
            scaled = graph.graph.call_function(torch.ops.aten.mul.Tensor, (x, mask))
            out = graph.graph.call_function(torch.ops.aten.mul.Tensor, (scaled, 1.0 / (1.0 - p) if p < 1 else 0.0))
        if "val" in node.meta:
            scaled.meta["val"] = out.meta["val"] = node.meta["val"][0]
        for user in list(node.users):
            if user.target is operator.getitem:
                user.replace_all_uses_with(out if user.args[1] == 0 else mask)
                graph.graph.erase_node(user)
        graph.graph.erase_node(node)
        masks.append((p, x.meta.get("val")))
    graph.recompile()
    return masks


def _shape(node) -> tuple | None:
    value = getattr(node, "meta", {}).get("val")
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def broadcast_copies(graph: GraphModule) -> int:
    """Rewrite every broadcasting `aten.copy(dst, src)` to `where(ones_like(dst, bool), src.to(dst.dtype), dst)`."""
    rewritten = 0
    for node in list(graph.graph.nodes):
        if node.target is not torch.ops.aten.copy.default or len(node.args) < 2:
            continue
        dst, src = node.args[:2]
        if not isinstance(src, torch.fx.Node) or _shape(src) is None or _shape(src) == _shape(dst):
            continue
        dtype = dst.meta["val"].dtype
        with graph.graph.inserting_before(node):
            true = graph.graph.call_function(torch.ops.aten.ones_like.default, (dst,), {"dtype": torch.bool})
            cast = graph.graph.call_function(torch.ops.aten._to_copy.default, (src,), {"dtype": dtype})
            where = graph.graph.call_function(torch.ops.aten.where.self, (true, cast, dst))
        true.meta["val"] = torch.ones_like(dst.meta["val"], dtype=torch.bool)
        cast.meta["val"] = src.meta["val"].to(dtype)
        where.meta["val"] = node.meta.get("val")
        node.replace_all_uses_with(where)
        graph.graph.erase_node(node)
        rewritten += 1
    if rewritten:
        graph.recompile()
    return rewritten
