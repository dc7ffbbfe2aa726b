"""Embedding gradient without a fresh vocabulary-sized allocation every step.

Stock `nn.Embedding` backward allocates a dense [V, H] zero tensor every step and adds the used rows
into it. At V = 50,265 and H = 256 that is 51 MB, and since allocators hand blocks that large back to
the operating system on free, every step pays page faults to get it again: ~20 ms per step on a
2-core CPU, for a gradient whose non-zero rows are the few hundred token ids of the batch.

This pass returns the used rows as a sparse gradient, which autograd's own accumulation adds into a
dense `.grad`, so gradient hooks (DDP's among them) still fire and the optimizer sees an ordinary dense
gradient. Where that dense gradient comes from depends on tying:
* untied (Llama, classification models): the pass keeps a persistent buffer and attaches it, zeroed
  (its pages are already resident, ~4 ms), as `weight.grad` when the weight has none;
* tied (a masked-LM decoder or an LM head sharing the matrix): the head's dense weight gradient is already
  a vocabulary-sized tensor; the rows are added into it in place (passes/embedding_grad/tied_rows.py: autograd would
  sum a sparse gradient and the head's out of place, a fresh [V, H] copy every step); where that cannot run
  (`torch.autograd.grad`, a weight substituted by `functional_call`) they are returned sparse as above.

Exact: the same sums as stock (rows of the padding index get no gradient, as stock), up to the float
order of duplicate-id accumulation (~1e-7 relative).
Subclasses of `nn.Embedding` whose forward calls `super().forward` (the scaled word embeddings of Gemma,
M2M-100 and ~70 more, which multiply the looked-up rows by a constant) get the buffered lookup in
that `super()` call: the instance's class becomes a subclass of its own class that puts the buffered forward
between it and `nn.Embedding`, so the model's own forward (and its scale) runs unchanged around it. A
probe lookup at install checks that the call arrives; a subclass that computes its rows another way is left
stock, and the pass says so. Only the module `get_input_embeddings()` returns is installed: a model whose
forward looks rows up through other modules sharing its weight (BART's encoder and decoder `embed_tokens`
beside `shared`) runs them stock.
Caveat: the buffer is reused, so a reference to a previous step's `weight.grad` kept past
`zero_grad()` sees it zeroed and refilled. Under `torch.compile` the stock embedding is traced.
Refused (stock embedding kept): `max_norm`, `scale_grad_by_freq` or `sparse=True` embeddings.

Accelerators: off by default (`refusal`, and the stock embedding on any weight not on the CPU unless
`on_accelerators=True`): the gain is the CPU allocator's page faults, and CUDA's caching allocator keeps
its blocks, so there is nothing to win. Refused with parameters sharded (FSDP, DeepSpeed ZeRO-3; the summary
names the engine): their gradients are reduced and scattered as dense shards, which take no sparse gradient. Where it runs on
an accelerator anyway, the padding rows' gradients are zeroed in place of being dropped (a boolean index
would be a host sync in every backward): the same sums, since the padding row's values added are zeros.
"""

from __future__ import annotations

import copy
import types
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from turbotrain import modeling
from turbotrain.boundaries.hf_boundary import sharding_engine
from turbotrain.passes import sharded
from turbotrain.passes.embedding_grad.tied_rows import TiedRows
from turbotrain.passes.registry import PassOptions, TrainerFacts, option, register_pass
from turbotrain.utils.warnings import log_once, warn_once


class _BufferedEmbedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_ids, weight, installed):
        ctx.save_for_backward(input_ids)
        ctx.installed, ctx.weight = installed, weight
        return F.embedding(input_ids, weight, installed.padding_idx)

    @staticmethod
    def backward(ctx, grad_output):
        (input_ids,) = ctx.saved_tensors
        weight, installed = ctx.weight, ctx.installed
        rows = input_ids.reshape(-1)
        values = grad_output.reshape(rows.numel(), -1)
        if installed.padding_idx is not None:
            rows, values = without_padding(rows, values, installed.padding_idx, sync_free=rows.device.type != "cpu")
        if installed.tied and installed.tied_rows.accepts(weight):
            installed.tied_rows.keep(rows, values.to(weight.dtype))
            return None, None, None
        if weight.grad is None and not installed.tied:
            weight.grad = installed.zeroed_buffer(weight)
        # ids were range-checked by F.embedding in forward, so the invariant check would only cost time
        sparse = torch.sparse_coo_tensor(
            rows[None], values.to(weight.dtype), weight.shape, is_coalesced=False, check_invariants=False
        )
        return None, sparse, None


def without_padding(rows: torch.Tensor, values: torch.Tensor, padding_idx: int, sync_free: bool):
    """(rows, values [N, H]) with the padding rows' gradient removed: dropped on the CPU, zeroed where a
    boolean index would be a host sync (an accelerator); either adds nothing to the padding row."""
    keep = rows != padding_idx
    if sync_free:
        return rows, values.masked_fill(~keep[:, None], 0)
    return rows[keep], values[keep]


class BufferedEmbeddingGrad:
    """The installed pass on one `nn.Embedding`; `remove()` restores the stock forward."""

    def __init__(self, embedding: nn.Embedding, tied: bool = False, on_accelerators: bool = False):
        self.embedding, self.tied, self.on_accelerators = embedding, tied, on_accelerators
        self.padding_idx = embedding.padding_idx
        self._buffer: torch.Tensor | None = None
        self.reached = False  # set by the buffered forward: did the embedding's own forward call it
        self._stock_class = type(embedding)
        self.tied_rows = TiedRows()
        if tied:
            self.tied_rows.watch(embedding.weight)  # now, before hooks registered later (frozen: at a forward)
        embedding._turbotrain_embedding_grad = self
        if self._stock_class is nn.Embedding:
            embedding.forward = types.MethodType(_forward, embedding)
        else:
            embedding.__class__ = _routed_class(self._stock_class)

    def zeroed_buffer(self, weight: torch.Tensor) -> torch.Tensor:
        buffer = self._buffer
        if (
            buffer is None
            or buffer.shape != weight.shape
            or buffer.dtype != weight.dtype
            or buffer.device != weight.device
        ):
            buffer = self._buffer = torch.zeros_like(weight, memory_format=torch.contiguous_format)
        else:
            buffer.zero_()
        return buffer

    def probe(self) -> bool:
        """Whether a lookup through the embedding's own forward reaches the buffered one (no gradient taken)."""
        self.reached = False
        try:
            with torch.no_grad():
                self.embedding(torch.zeros((1, 1), dtype=torch.long, device=self.embedding.weight.device))
        except Exception:  # noqa: BLE001 - a forward that needs more than ids: not a plain lookup, left stock
            return False
        return self.reached

    def remove(self) -> None:
        self.embedding.__dict__.pop("forward", None)
        self.embedding.__dict__.pop("_turbotrain_embedding_grad", None)
        if type(self.embedding) is _ROUTED.get(self._stock_class):  # not a class swap made since
            self.embedding.__class__ = self._stock_class
        self._buffer = None
        self.tied_rows.release()


class _BufferedLookup(nn.Embedding):
    """Sits between a subclass and `nn.Embedding` in a routed class: its `super().forward` lands here.

    A deep copy keeps the routing (as the plain embedding's bound forward does); a pickled one
    (`torch.save(model)`) comes back as the stock class, which every process can import."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - nn.Embedding.forward's own name
        return _forward(self, input)

    def __deepcopy__(self, memo: dict):
        copied = object.__new__(type(self))
        memo[id(self)] = copied
        copied.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return copied

    def __reduce_ex__(self, protocol):
        state = {name: value for name, value in self.__dict__.items() if name != "_turbotrain_embedding_grad"}
        return _unpickled_stock, (type(self).__mro__[1],), state


def _unpickled_stock(stock: type) -> nn.Module:
    return object.__new__(stock)


_ROUTED: dict[type, type] = {}


def _routed_class(stock: type) -> type:
    """`stock` with the buffered lookup under it (one class per stock class, same name and module)."""
    if stock not in _ROUTED:
        _ROUTED[stock] = type(stock.__name__, (stock, _BufferedLookup), {"__module__": stock.__module__})
    return _ROUTED[stock]


def _forward(self: nn.Embedding, input_ids: torch.Tensor) -> torch.Tensor:
    installed = self._turbotrain_embedding_grad
    if torch.compiler.is_compiling():
        return F.embedding(input_ids, self.weight, self.padding_idx)
    installed.reached = True
    if not (torch.is_grad_enabled() and self.weight.requires_grad):
        return F.embedding(input_ids, self.weight, self.padding_idx)
    if self.weight.device.type != "cpu" and not installed.on_accelerators:  # moved there after the install
        return F.embedding(input_ids, self.weight, self.padding_idx)
    if installed.tied and self.weight is installed.embedding.weight:
        installed.tied_rows.watch(self.weight)
    return _BufferedEmbedding.apply(input_ids, self.weight, installed)


def refusal(device: torch.device | str, engine: str | None) -> str | None:
    """Why the buffer should not be used for a run on `device` with parameters sharded by `engine` (its name:
    "DeepSpeed ZeRO-3", "FSDP2"; None when whole), or None."""
    if engine:
        return f"{engine} shards the parameters: its dense shards take no sparse gradient"
    kind = torch.device(device).type
    if kind != "cpu":
        return (
            f"off on {kind}: its gain is the CPU allocator's page faults, which {kind}'s caching allocator does not pay"
        )
    return None


def apply_embedding_grad(model: nn.Module, on_accelerators: bool = False) -> BufferedEmbeddingGrad | None:
    """Install the buffered gradient on the model's input embedding; None (with a warning) if it cannot.

    A model whose embedding is not on the CPU is left stock (one log line) unless `on_accelerators`."""
    embedding = modeling.input_embedding(model)
    if not isinstance(embedding, nn.Embedding):
        return None  # nothing to speed up (no table, or a custom embedding module): silently stock
    if getattr(embedding, "_turbotrain_embedding_grad", None) is not None:
        return embedding._turbotrain_embedding_grad  # installed already
    if embedding.max_norm is not None or embedding.scale_grad_by_freq or embedding.sparse:
        warn_once(
            f"turbotrain: embedding gradient buffer left {type(model).__name__} stock: its embedding uses "
            "max_norm, scale_grad_by_freq or sparse gradients."
        )
        return None
    engine = sharded.engine_of(embedding)  # its weight a ZeRO-3 partition or a DTensor
    why = refusal(embedding.weight.device, engine)
    if engine is not None or (why is not None and not on_accelerators):
        log_once(f"turbotrain: embedding gradient buffer left {type(model).__name__} stock: {why}")
        return None
    projection = modeling.output_projection(model)
    output = modeling.output_linear(projection) or projection
    tied = output is not None and getattr(output, "weight", None) is embedding.weight
    installed = BufferedEmbeddingGrad(embedding, tied=tied, on_accelerators=on_accelerators)
    if not installed.probe():
        installed.remove()
        log_once(
            f"turbotrain: embedding gradient buffer left {type(model).__name__} stock: its "
            f"{type(embedding).__name__}.forward does not look rows up through nn.Embedding.forward."
        )
        return None
    return installed


def trainer_refusal(trainer, facts: TrainerFacts) -> str | None:
    """Why this trainer's run should keep the stock embedding backward: the buffer pays on the CPU only, and
    sharded parameters (FSDP / ZeRO-3) take no sparse gradient."""
    return refusal(trainer.args.device, sharding_engine(trainer))


@register_pass(
    order=40,
    install=lambda model, setup: apply_embedding_grad(model),
    refused_for=lambda model: False,
    refused_by_trainer=trainer_refusal,
    not_applicable=lambda model: (
        None if modeling.input_embedding(model) is not None else f"{type(model).__name__} has no input embedding"
    ),
)
@dataclass(frozen=True)
class EmbeddingGradOptions(PassOptions):
    """Accumulate the input embedding's gradient into a persistent buffer instead of a fresh vocabulary-sized
    tensor every step (exact; passes/embedding_grad/)."""

    embedding_grad: bool = option(True)
