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
* tied (a masked-LM decoder sharing the matrix): the decoder's dense weight gradient is already a
  vocabulary-sized tensor, and autograd adds the sparse rows into it in place; no buffer is attached,
  which would cost a zeroing and an extra add over the whole matrix.

Exact: the same sums as stock (rows of the padding index get no gradient, as stock), up to the float
order of duplicate-id accumulation (~1e-7 relative).
Caveat: the buffer is reused, so a reference to a previous step's `weight.grad` kept past
`zero_grad()` sees it zeroed and refilled. Under `torch.compile` the stock embedding is traced.
Refused (stock embedding kept): `max_norm`, `scale_grad_by_freq` or `sparse=True` embeddings.

Accelerators: off by default (`refusal`, and the stock embedding on any weight not on the CPU unless
`on_accelerators=True`): the gain is the CPU allocator's page faults, and CUDA's caching allocator keeps
its blocks, so there is nothing to win. Refused with parameters sharded (FSDP, DeepSpeed ZeRO-3): their
gradients are reduced and scattered as dense flat shards, which take no sparse gradient. Where it runs on
an accelerator anyway, the padding rows' gradients are zeroed in place of being dropped (a boolean index
would be a host sync in every backward): the same sums, since the padding row's values added are zeros.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch import nn

from turbotrain import modeling
from turbotrain.passes.registry import PassSpec, register_pass
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
        embedding.forward = types.MethodType(_forward, embedding)
        embedding._turbotrain_embedding_grad = self

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

    def remove(self) -> None:
        self.embedding.__dict__.pop("forward", None)
        self.embedding.__dict__.pop("_turbotrain_embedding_grad", None)
        self._buffer = None


def _forward(self: nn.Embedding, input_ids: torch.Tensor) -> torch.Tensor:
    installed = self._turbotrain_embedding_grad
    if torch.compiler.is_compiling() or not (torch.is_grad_enabled() and self.weight.requires_grad):
        return F.embedding(input_ids, self.weight, self.padding_idx)
    if self.weight.device.type != "cpu" and not installed.on_accelerators:  # moved there after the install
        return F.embedding(input_ids, self.weight, self.padding_idx)
    return _BufferedEmbedding.apply(input_ids, self.weight, installed)


def refusal(device: torch.device | str, sharded: bool) -> str | None:
    """Why the buffer should not be used for a run on `device` (parameters `sharded` by FSDP / ZeRO-3), or None."""
    if sharded:
        return "parameters are sharded (FSDP / DeepSpeed ZeRO-3), whose flat dense shards take no sparse gradient"
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
    if type(embedding) is not nn.Embedding:
        return None  # nothing to speed up (no table, or a custom embedding module): silently stock
    if embedding.max_norm is not None or embedding.scale_grad_by_freq or embedding.sparse:
        warn_once(
            f"turbotrain: embedding gradient buffer left {type(model).__name__} stock: its embedding uses "
            "max_norm, scale_grad_by_freq or sparse gradients."
        )
        return None
    why = refusal(embedding.weight.device, sharded=False)
    if why is not None and not on_accelerators:
        log_once(f"turbotrain: embedding gradient buffer left {type(model).__name__} stock: {why}")
        return None
    projection = modeling.output_projection(model)
    output = modeling.output_linear(projection) or projection
    tied = output is not None and getattr(output, "weight", None) is embedding.weight
    return BufferedEmbeddingGrad(embedding, tied=tied, on_accelerators=on_accelerators)


def trainer_refusal(trainer) -> str | None:
    """Why this trainer's run should keep the stock embedding backward: the buffer pays on the CPU only, and
    sharded parameters (FSDP / ZeRO-3) take no sparse gradient."""
    from turbotrain import device_step  # the trainer's device and sharding, asked only by a trainer

    return refusal(trainer.args.device, sharded=device_step.shards_parameters(trainer))


register_pass(
    PassSpec(
        name="embedding_grad",
        help=(
            "Accumulate the input embedding's gradient into a persistent buffer instead of a fresh vocabulary-sized "
            "tensor every step (exact; passes/embedding_grad.py)."
        ),
        order=40,
        install=lambda model, setup: apply_embedding_grad(model),
        refused_for=lambda model: False,
        refused_by_trainer=trainer_refusal,
        not_applicable=lambda model: (
            None if modeling.input_embedding(model) is not None else f"{type(model).__name__} has no input embedding"
        ),
    )
)
