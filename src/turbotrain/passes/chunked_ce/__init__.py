"""Chunked linear cross-entropy: the head's logits on the kept rows, never all at once.

Op -> module -> install, in this file:

* op `LinearCrossEntropy` (autograd.Function): hidden [K, H], weight [V, H], bias [V] or None, targets
  [K] -> per-row negative log-likelihood [K] (and, without gradient, per-row entropy and whether the
  target is the arg-max, for TRL's metrics). Rows go through in chunks of `chunk_rows`: logits
  z = h·Wᵀ + b [C, V] (fp32 for the softmax, as Transformers' loss upcasts), optional soft-capping
  z = c·tanh(z / c) (Gemma-2), log-sum-exp, and then, still in the forward, the gradient of each row's
  loss: dz = softmax(z) - onehot(target) (times 1 - tanh² under soft-capping), dh = dz·W [C, H],
  dW += dzᵀ·h, db += Σ dz. Nothing is recomputed in the backward (PERF-NOTES: a recomputing chunked
  head ran slower than dense on CPU; computing the gradient in the forward beat it). The backward only
  scales: dh row k by grad_output[k] (exact for any weighting); dW and db by the one shared factor, which
  requires the per-row weights to be equal (a sum or a mean of the rows: Transformers' losses and TRL's
  "nll" loss). Unequal weights on a trainable head raise an error naming the option that turns this off
  (on CUDA at the next call: the check is read back a step later, chunked_ce/cuda.py).
  A frozen head (LoRA) gets no dW at all, and hidden states that need no gradient get no dh.
* module `ChunkedHead`: takes over the output projection (`get_output_embeddings()`, or the active
  copy inside a PEFT `modules_to_save` wrapper) for one forward call: label sparsity hands it the kept
  targets and strips the labels from the model call (so the model builds no logits and no loss), the
  projection returns an empty [K, 0] placeholder in place of the logits (a view of the NLL, so that an
  engine's hooks on the head's output see the loss's backward pass: `placeholder`), and the model's output gets
  the loss: Σ nll / `num_items_in_batch` when Trainer passes it, else the mean over kept rows (stock's
  reduction; no kept row gives NaN and zero gradients, as stock).
* install `apply_chunked_ce(model, mode)`, called by label sparsity while it is built (the chunked head
  is its head from then on; the registry states it, `part_of="label_sparsity"`, and hands label sparsity's
  install this pass's options): "auto" takes a call over only when its kept logits would exceed
  `AUTO_BYTES` (K·V·4 > 64 MB), "always"/"never" force it. A self-check compares the chunked loss
  (a trial head taking every call, behind a trial label sparsity) with stock on a small batch; a
  mismatch leaves the model on plain label sparsity with one warning. Refused: heads that are not a plain `nn.Linear` (LoRA on `lm_head`) and
  logit scales other than soft-capping (the self-check would catch them too). Not used (one log
  line): encoder-decoder LMs (T5, BART, Whisper), whose head label sparsity runs on the kept rows.

Exact: per row the same log-sum-exp in fp32 as stock; dW is summed chunk by chunk in fp32 (float order
only: ≤1e-6 relative measured at vocab 151,936, tests/passes/test_chunked_ce.py). Tied heads work: the
weight is the embedding's, autograd adds both gradients into it. With `gradient_checkpointing=True`
the head is outside the checkpointed layers, so nothing changes.
Memory: one chunk of logits [chunk_rows, V] fp32 plus dW [V, H] (fp32) instead of [K, V] logits,
their softmax and their gradient.
On CUDA (chunked_ce/cuda.py): the matmuls run in the run's autocast dtype (bf16/fp16) with dW summed in
fp32, chunks of max(H, 2,048) rows, and the backward reads no value back to the host; each chunk's softmax and
gradient run as a few Inductor-compiled kernels, dz written over the logits, where the device measured them faster
(chunked_ce/fused_epilogue.py).
The CPU op is unchanged.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from turbotrain import modeling
from turbotrain.passes import fused_head_calls
from turbotrain.passes.chunked_ce import cuda, fused_epilogue, head_choice
from turbotrain.passes.chunked_ce.logprobs import head_logits, linear_log_probs
from turbotrain.passes.registry import PassOptions, option, register_pass
from turbotrain.passes.self_check import check_forced, never_raises
from turbotrain.utils.warnings import warn_once

logger = logging.getLogger("turbotrain")

AUTO_BYTES = 64 * 2**20  # take over when the kept fp32 logits would be larger than this
CHUNK_BYTES = 128 * 2**20  # fp32 logits of one chunk (~220 rows at 151,936: dW's read-modify-write per chunk
# made smaller chunks slower than dense on a 2-core CPU; at 128 MB the chunked head ran as fast as dense)
MODES = ("auto", "always", "never")
NAME = "chunked_cross_entropy"  # the pass's name and option; label sparsity builds it as its head (`part_of`)


def chunk_rows_for(vocab: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    return max(1, chunk_bytes // (4 * vocab))


# --- op ----------------------------------------------------------------------------------------------


def _chunk(h, weight, bias, target, softcap, want_stats, grad_dtype, fused=None):
    """One chunk: (nll [C], dz [C, V] in `grad_dtype`, entropy [C] or None, is_top1 [C] or None); `fused`: the
    softmax and gradient as compiled functions of the matmul's output, dz written over it (fused_epilogue.py)."""
    if fused is not None and h.shape[0] >= fused_epilogue.MIN_ROWS:
        return fused(h @ weight.T, bias, target, softcap, want_stats)  # [C, H] x [H, V] -> [C, V]
    z, tanh = head_logits(h, weight, bias, softcap)  # [C, V] fp32
    lse = torch.logsumexp(z, dim=1)  # [C]
    rows = torch.arange(z.shape[0], device=z.device)
    nll = lse - z[rows, target]
    entropy = is_top1 = None
    if want_stats:
        is_top1 = z.argmax(dim=1) == target
        probs = torch.sub(z, lse[:, None]).exp_()  # one [C, V] besides z: no temporary z - lse
        entropy = lse - z.mul_(probs).sum(dim=1)  # the product in place of the logits, then they are dropped
        z = probs
    else:
        z.sub_(lse[:, None]).exp_()  # softmax, in place
    z[rows, target] -= 1  # dz = softmax - onehot: d nll / d z
    if softcap:
        z.mul_(1 - tanh * tanh)
    return nll, z.to(grad_dtype), entropy, is_top1


class LinearCrossEntropy(torch.autograd.Function):
    """Per-row NLL of a linear head, its gradients computed chunk by chunk in the forward (module docstring).

    `compute_dtype` None: the op as built on the CPU (fp32 weight gradient); a half dtype: its matmuls in that
    dtype with dW summed in fp32 (chunked_ce/cuda.py, chosen on CUDA)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, softcap, chunk_rows, want_stats, compute_dtype=None, fuse=True):
        if cuda.PENDING.pending:
            cuda.PENDING.raise_if_unequal()
        if compute_dtype is not None:
            args = (hidden, weight, bias, targets, softcap, chunk_rows, want_stats, fuse)
            return _forward_in(ctx, compute_dtype, *args)
        rows = hidden.shape[0]
        nll, entropy, is_top1, dh, dw, db = _outputs(ctx, hidden, weight, bias, want_stats)
        fused = _fused(fuse, hidden.device, weight, bias, chunk_rows, softcap, want_stats, weight.dtype)
        for start in range(0, rows, chunk_rows):
            part = slice(start, min(start + chunk_rows, rows))
            h = hidden[part]
            nll[part], dz, ent, top1 = _chunk(h, weight, bias, targets[part], softcap, want_stats, weight.dtype, fused)
            if want_stats:
                entropy[part], is_top1[part] = ent, top1
            if dh is not None:
                dh[part] = dz @ weight  # [C, V] x [V, H] -> [C, H]
            if dw is not None:  # [V, C] x [C, H]; the first chunk writes dW, the others add to it
                dz_t, h32 = dz.T.float(), h.float()
                if start == 0:
                    torch.mm(dz_t, h32, out=dw)
                else:
                    dw.addmm_(dz_t, h32)
            if db is not None:
                db += dz.sum(dim=0, dtype=torch.float32)
        return _saved(ctx, weight, bias, (dh, dw, db), (nll, entropy, is_top1) if want_stats else (nll,))

    @staticmethod
    def backward(ctx, grad_nll, *unused):
        dh, dw, db = ctx.saved_tensors
        grad_h = grad_w = grad_b = None
        if dh is not None:
            grad_h = dh * grad_nll[:, None].to(dh.dtype)
        if dw is not None or db is not None:
            scale = cuda.shared_factor(grad_nll)
            # in place: the saved sums are used once (no retain_graph through a training loss)
            grad_w = dw.mul_(scale).to(ctx.dtypes[0]) if dw is not None else None
            grad_b = db.mul_(scale).to(ctx.dtypes[1]) if db is not None else None
        return grad_h, grad_w, grad_b, None, None, None, None, None, None


def _fused(fuse, device, weight, bias, chunk_rows, softcap, want_stats, grad_dtype):
    """The fused softmax and gradient where `fuse` asks for it and the device measured it faster, else None."""
    if not fuse:
        return None

    def eager(h, target):
        return _chunk(h, weight, bias, target, softcap, want_stats, grad_dtype)

    return fused_epilogue.fused_for(device, weight, bias, chunk_rows, softcap, want_stats, eager)


def _saved(ctx, weight, bias, gradients, outputs):
    """Keep the pre-computed gradients for the backward; mark the statistics non-differentiable."""
    ctx.save_for_backward(*gradients)
    ctx.dtypes = (weight.dtype, bias.dtype if bias is not None else None)
    for stat in outputs[1:]:
        ctx.mark_non_differentiable(stat)
    return outputs


def _outputs(ctx, hidden, weight, bias, want_stats: bool):
    """The forward's fp32 results, each [rows], and the gradient buffers the inputs that need one get."""
    rows = hidden.shape[0]
    need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    need_b = bias is not None and ctx.needs_input_grad[2]
    nll = hidden.new_empty(rows, dtype=torch.float32)
    entropy = hidden.new_zeros(rows, dtype=torch.float32) if want_stats else None
    is_top1 = hidden.new_zeros(rows, dtype=torch.bool) if want_stats else None
    dh = torch.empty_like(hidden) if need_h else None
    make = torch.zeros if rows == 0 else torch.empty  # the first chunk writes dW (no rows: zero gradient)
    dw = make(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
    db = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
    return nll, entropy, is_top1, dh, dw, db


def _forward_in(ctx, dtype, hidden, weight, bias, targets, softcap, chunk_rows, want_stats, fuse=True):
    """The forward with its matmuls in the half `dtype`, dW summed in fp32 (chunked_ce/cuda.py)."""
    rows = hidden.shape[0]
    nll, entropy, is_top1, dh, dw, db = _outputs(ctx, hidden, weight, bias, want_stats)
    with torch.autocast(hidden.device.type, enabled=False):  # every input is cast here, once
        w = weight.to(dtype)  # [V, H]
        fused = _fused(fuse, hidden.device, w, bias, chunk_rows, softcap, want_stats, dtype)
        for start in range(0, rows, chunk_rows):
            part = slice(start, min(start + chunk_rows, rows))
            h = hidden[part].to(dtype)
            nll[part], dz, ent, top1 = _chunk(h, w, bias, targets[part], softcap, want_stats, dtype, fused)
            if want_stats:
                entropy[part], is_top1[part] = ent, top1
            if dh is not None:
                dh[part] = dz @ w  # [C, V] x [V, H] -> [C, H]
            if dw is not None:  # [V, C] x [C, H] in the half dtype, summed in fp32
                cuda.add_weight_grad(dw, dz.T, h, first=start == 0)
            if db is not None:
                db += dz.sum(dim=0, dtype=torch.float32)
    return _saved(ctx, weight, bias, (dh, dw, db), (nll, entropy, is_top1) if want_stats else (nll,))


def linear_cross_entropy(hidden, weight, bias, targets, *, softcap=None, chunk_rows=None, want_stats=False):
    """Per-row NLL [K] (plus entropy [K], is_top1 [K] with `want_stats`) of the head on rows `hidden` [K, H].

    On CUDA the matmuls run in the run's autocast dtype (or the weight's half dtype) with dW summed in fp32,
    in chunks sized from H (chunked_ce/cuda.py); on the CPU in fp32, in chunks of `CHUNK_BYTES` of logits."""
    autocast = cuda.autocast_dtype_of(hidden.device)
    compute_dtype = cuda.compute_dtype_for(hidden.device, weight.dtype, autocast)
    if chunk_rows is None:
        on_cuda = hidden.device.type == "cuda"
        chunk_rows = cuda.cuda_chunk_rows(weight.shape[1]) if on_cuda else chunk_rows_for(weight.shape[0])
    args = (hidden, weight, bias, targets, softcap or None, chunk_rows, want_stats, compute_dtype)
    outputs = LinearCrossEntropy.apply(*args)
    return outputs if want_stats else outputs[0]


# --- module ------------------------------------------------------------------------------------------


@dataclass
class Call:
    """What one model call handed over: the kept targets and how to reduce."""

    targets: torch.Tensor
    num_items: torch.Tensor | int | None
    want_stats: bool = False
    fused: tuple[torch.Tensor, torch.Tensor] | None = None  # TRL's fused call: (rows [K], shifted targets [B, T])
    nll: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    is_top1: torch.Tensor | None = None
    mean_logits: torch.Tensor | None = None


class ChunkedHead:
    """The installed pass: takes over the output projection for the calls label sparsity hands it."""

    def __init__(self, model: nn.Module, projection: nn.Module, mode: str, compose_fused_calls: bool | str = False):
        self.model, self.projection, self.mode = model, projection, mode
        self.softcap = modeling.final_logit_softcapping(model)
        self.vocab = modeling.output_linear(projection).out_features
        self.call: Call | None = None
        # answer TRL's fused_lm_head calls (fused_head_calls.py) for a trainer whose loss weighting is known:
        # "equal" (turbo(SFTTrainer), loss_type="nll": dW summed in the forward) or "per_row" (turbo(DPOTrainer):
        # any weight per token, chunked_ce/logprobs.py)
        self.fused_weighting = fused_head_calls.weighting_of(compose_fused_calls)
        self.compose_fused_calls = self.fused_weighting is not None
        self.fused_stats = True  # False: a reference model's calls, log-probs only (label_sparsity/reference_calls.py)
        self.temperature = 1.0  # TRL's fused head divides the logits by it (GRPO's sampling temperature)
        projection.forward = types.MethodType(_projection_forward, projection)
        projection._turbotrain_chunked_ce = self

    @property
    def auto_rule(self) -> str:
        """When "auto" takes a call over, in words (for the run's summary line)."""
        return f"auto: calls with more than {AUTO_BYTES // (4 * self.vocab):,} kept rows ({AUTO_BYTES // 2**20} MB of logits)"

    def wants(self, kept_rows: int) -> bool:
        return self.mode == "always" or (self.mode == "auto" and kept_rows * self.vocab * 4 > AUTO_BYTES)

    def take(self, kwargs: dict, targets: torch.Tensor, fused: tuple | None = None) -> dict:
        """Strip the labels from the model call and hold the kept targets for the projection.

        `fused`: (rows, shifted targets) of a TRL `fused_lm_head` call, answered in TRL's form."""
        self.call = Call(
            targets=targets, num_items=kwargs.get("num_items_in_batch"), want_stats=fused is not None, fused=fused
        )
        drop = ("labels", "shift_labels", "num_items_in_batch", fused_head_calls.FLAG)
        return {k: v for k, v in kwargs.items() if k not in drop}

    def loss(self) -> torch.Tensor:
        call = self.call
        total = call.nll.sum()
        divisor = call.num_items if call.num_items is not None else call.nll.numel()
        if isinstance(divisor, torch.Tensor):
            divisor = divisor.to(total.device)
        return total / divisor

    def drop_call(self) -> None:
        """Forget the call a forward that raised left taken (its `finish` never came)."""
        self.call = None

    def finish(self, output):
        """The model's output with the chunked loss in place of the (absent) stock one; clears the call."""
        call = self.call
        if call is not None and call.nll is not None:
            call.nll = call.nll + engine_anchor(output)  # + 0, through what the engine made of the head's output
        loss = self.loss() if call is not None and call.nll is not None else None
        self.call = None
        if loss is None or output is None:
            return output
        if call.fused is not None:
            return fused_head_calls.fused_output(call, loss)
        if isinstance(output, tuple):
            return (loss, *output)
        return type(output)(**{"loss": loss, **{k: v for k, v in output.items() if k != "loss"}})

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        call, linear = self.call, modeling.output_linear(self.projection)
        flat = hidden.reshape(-1, hidden.shape[-1])  # label sparsity gathered: [K, H]
        call.targets = call.targets.to(linear.weight.device, non_blocking=True)  # the labels' device may be another
        if call.fused is None:
            call.nll, call.entropy, call.is_top1, _ = self._projected(flat, linear, call.targets, call.want_stats)
            return placeholder(call.nll, hidden)
        stats = self.fused_stats if self.fused_weighting == fused_head_calls.PER_ROW else call.want_stats
        chunked = lambda rows, targets: self._projected(rows, linear, targets, stats, fused=True)  # noqa: E731
        head = head_choice.head_for(flat, linear, self.softcap, self.temperature, stats, self.fused_weighting, chunked)
        if head == head_choice.TRL:  # TRL's kernel measured faster here (head_choice.py)
            result = head_choice.trl_projection(
                flat, linear.weight, linear.bias, call.targets, self.softcap, self.temperature, stats
            )
        else:
            result = chunked(flat, call.targets)
        call.nll, call.entropy, call.is_top1, call.mean_logits = result
        return placeholder(call.nll, hidden)

    def _projected(self, rows, linear, targets, want_stats: bool, fused: bool = False) -> tuple:
        """(nll, entropy, is_top1, mean_logits) of the chunked head on `rows` [K, H]: the per-row op for a fused
        call weighted per row (its logits divided by the temperature), else the op with dW summed in the forward."""
        if fused and self.fused_weighting == fused_head_calls.PER_ROW:
            return linear_log_probs(rows, linear.weight, linear.bias, targets, softcap=self.softcap,
                                    want_stats=want_stats, temperature=self.temperature)  # fmt: skip
        result = linear_cross_entropy(rows, linear.weight, linear.bias, targets, softcap=self.softcap,
                                      want_stats=want_stats)  # fmt: skip
        return (*result, None) if want_stats else (result, None, None, None)

    def remove(self) -> None:
        self.projection.__dict__.pop("forward", None)
        self.projection.__dict__.pop("_turbotrain_chunked_ce", None)


def placeholder(nll: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """What the head returns in place of logits: [K, 0], empty, yet a view of the per-row NLL [K], so it lies on the
    loss's autograd path (`finish` adds its sum, 0, to the NLL). An engine that hooks the head module's output sees
    the loss's gradient pass there: DeepSpeed ZeRO-3 gathers the head's weight again from that hook before the
    backward reaches the op, as it does for a stock head (passes/sharded.py)."""
    return nll.view(*hidden.shape[:-1], 1)[..., :0].to(hidden.dtype)  # [K] -> [K, 0]


def engine_anchor(output) -> torch.Tensor | float:
    """The sum (0) of the head's placeholder as the model returned it (its `logits`), or 0.0 without one."""
    logits = output.get("logits") if isinstance(output, dict) else output[0] if isinstance(output, tuple) else None
    if not (torch.is_tensor(logits) and logits.numel() == 0 and logits.requires_grad):
        return 0.0
    return logits.sum()


def _projection_forward(self: nn.Module, hidden: torch.Tensor, *args, **kwargs):
    installed = self._turbotrain_chunked_ce
    if installed.call is None or installed.call.nll is not None:
        return type(self).forward(self, hidden, *args, **kwargs)
    return installed.project(hidden)


# --- install -----------------------------------------------------------------------------------------


@never_raises
def self_check(model: nn.Module, label_sparsity) -> str | None:
    """Stock vs chunked loss on a small batch, through `label_sparsity` (a LabelSparsity whose chunked head
    takes every call); a description of the mismatch, or None."""
    return check_forced(model, label_sparsity.forced, [9, 7], "chunked cross-entropy", seed=4321, ignore_every=3)


def apply_chunked_ce(
    model: nn.Module,
    mode: str = "auto",
    *,
    fused_head_calls: bool | str = False,
    check_with: Callable[[ChunkedHead], str | None] | None = None,
) -> ChunkedHead | None:
    """The chunked head for label sparsity to hold, or None ("never", or refused).

    `fused_head_calls`: answer TRL's fused_lm_head calls too (True or "equal": every token weighted alike;
    "per_row": any weighting, fused_head_calls.py). `check_with(trial)`: the self-check of a trial
    head in mode "always" (label sparsity runs `self_check` behind it); a problem refuses, with one warning."""
    if mode not in MODES:
        raise ValueError(f"chunked_cross_entropy must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "never":
        return None
    if modeling.is_seq2seq_lm(model):  # not built for encoder-decoder calls yet: the dense head on kept rows stays
        logger.info(
            "turbotrain: chunked cross-entropy is not used for %s (encoder-decoder); label sparsity's "
            "head runs on the kept rows",
            type(model).__name__,
        )
        return None
    projection = modeling.output_projection(model)
    if projection is None or modeling.output_linear(projection) is None:
        warn_once(
            f"turbotrain: chunked cross-entropy left {type(model).__name__} on label sparsity: its output "
            "head is not a plain linear layer (e.g. LoRA on lm_head)."
        )
        return None
    if check_with is not None:
        trial = ChunkedHead(model, projection, "always")
        try:
            problem = check_with(trial)
        finally:
            trial.remove()
        if problem is not None:
            warn_once(f"turbotrain: chunked cross-entropy left {type(model).__name__} on label sparsity: {problem}.")
            return None
    return ChunkedHead(model, projection, mode, compose_fused_calls=fused_head_calls)


# --- registration (passes/registry.py) ---------------------------------------------------------------


def _label(installed: ChunkedHead) -> str:
    return f"chunked_cross_entropy ({installed.auto_rule})" if installed.mode == "auto" else "chunked_cross_entropy"


@register_pass(
    order=20,
    # built by label sparsity as its head (apply_chunked_ce above), from this pass's options the registry hands
    # it; reported under its own name. Its refusals leave label sparsity on, with their own warning.
    install=None,
    part_of="label_sparsity",
    label=_label,
    listed_when_inactive=False,  # "auto", the default, asks for it only on large calls
)
@dataclass(frozen=True)
class ChunkedCrossEntropyOptions(PassOptions):
    """With label sparsity, compute the head and loss on the kept rows in chunks, never all logits at once:
    'auto' (when the kept logits would pass 64 MB), 'always', 'never' (exact; passes/chunked_ce/)."""

    chunked_cross_entropy: str = option("auto", choices=MODES, off="never")
