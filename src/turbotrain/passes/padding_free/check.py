"""Padding-free's install-time self-check: padded vs packed forward on a synthetic batch.

`self_check(model, installed, task)` packs sequences longer than the model's largest window or chunk
(`check_lengths`: w + 2 and w + 1 tokens sharing one row, and a short one), compares the loss
(`_loss_check`: forward-only on an fp32 CPU run, forward and backward under the run's precision elsewhere),
every real token's logits (`compare_token_outputs`), padded batches through the packed-attention function
against stock, and whether a row's second sequence reads its first (`carries_state`). It returns a
one-line description of the first problem, or None; it never raises (`never_raises`: outputs that do not line
up with the batch, such as a PEFT prompt-tuning model's [B, L + 8, V] logits for [B, L] tokens, are a problem).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from turbotrain import modeling
from turbotrain.passes import self_check as checks
from turbotrain.passes.padding_free.packing import SEQUENCE_STARTS, PackingSpec, pack_batch
from turbotrain.utils.mode import training_mode


def _loss_check(model: nn.Module):
    """The loss comparison for this run: forward and backward under its autocast, NaN/inf gradients refused,
    where the run is on an accelerator or in half precision (where kernels differ: cuDNN's masked attention);
    a forward in the model's dtype on an fp32 CPU run (flex attention has no CPU backward to run there)."""
    precision = checks.current_precision(model)
    if precision.device_type == "cpu" and precision.autocast_dtype is None:
        return checks.compare_losses
    return checks.check_under_run_precision


def check_lengths(model: nn.Module) -> tuple[list[int], int]:
    """Sequence lengths for the self-check, and the least row capacity to pack them with.

    Without windows: 6, 2 and 9 tokens. With a largest window or chunk w: w + 2 and w + 1 tokens, which
    share one row (capacity 2w + 3 and up), and 3: each long sequence outruns the window, and the second
    sits where its row's positions run past w."""
    spans = modeling.attention_spans(model)
    if not spans:
        return [6, 2, 9], 0
    window = spans[-1]
    return [window + 2, window + 1, 3], 2 * window + 6


@checks.never_raises
def self_check(model: nn.Module, installed, task: str) -> str | None:
    """Padded vs packed loss and per-token outputs on an uneven batch longer than any window, then
    `carries_state`; a description of the problem, or None."""
    lengths, capacity = check_lengths(model)
    padded = modeling.synthetic_batch(model, lengths, seed=4321, ignore_every=0 if installed.spec.causal else 3)
    packed = _packed(padded, installed.spec, next(model.parameters()).device, capacity)
    stock = partial(_stock_forward, model, installed, padded)
    problem = _loss_check(model)(model, stock, lambda: model(**packed), "packed")
    if problem is None:
        problem = compare_token_outputs(model, padded, packed, stock)
    if problem is None and installed.attention is not None:
        problem = _padded_outputs_changed(model, stock, padded)
    if problem is None and carries_state(model, installed.spec):
        problem = (
            "a sequence's outputs change with the sequence packed before it in a row (state carried along the "
            "row outside attention: a convolution or state-space layer)"
        )
    return problem


def _stock_forward(model: nn.Module, installed, batch: dict):
    """The model's output on `batch` with its own attention (switched back for the call where switched)."""
    if installed.attention is None:
        return model(**batch)
    with installed.attention.stock():
        return model(**batch)


def _padded_outputs_changed(model: nn.Module, stock, padded: dict) -> str | None:
    """Whether a padded batch through the packed-attention function (evaluation) gives other outputs than stock."""
    with checks.forward_raises("padded forward through packed attention"), training_mode(model, False), torch.no_grad():
        expected, got = stock().logits, model(**padded).logits
    if not torch.equal(expected, got):
        return f"padded outputs through packed attention differ from stock by {(expected - got).abs().max():.3g}"
    return None


def _packed(padded: dict, spec: PackingSpec, device, capacity: int = 0) -> dict:
    packed = pack_batch({k: v.cpu() for k, v in padded.items()}, spec, min_capacity=capacity)
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in packed.items()}


@checks.never_raises
def compare_token_outputs(model: nn.Module, padded: dict, packed: dict, stock=None) -> str | None:
    """None when every real token's logits (per-sequence logits for a pooling classifier) agree between the
    padded and the packed forward (1e-4 of the largest in fp32, 2e-2 otherwise), else what differs. A loss
    hides a change at a few tokens (ModernBERT's local band moved the loss by 1.7e-5 only). `stock`: the
    padded forward to compare with (default: the model's on `padded`)."""
    with checks.forward_raises("packed forward"), training_mode(model, False), torch.no_grad():
        stock = stock() if stock is not None else model(**padded)
        stock, rewritten = stock.logits, model(**packed).logits
    tokens = padded["attention_mask"].bool()
    problem = _unaligned(stock, rewritten, tokens)
    if problem is not None:
        return problem
    if stock.dim() == 3:  # [B, L, V] -> [N, V], real tokens in batch order; packed [R, C, V] at the same tokens
        lengths = tokens.sum(1)
        within = torch.arange(int(lengths.sum()), device=lengths.device) - torch.repeat_interleave(
            lengths.cumsum(0) - lengths, lengths
        )
        places = torch.repeat_interleave(packed[SEQUENCE_STARTS].to(lengths.device), lengths) + within
        stock, rewritten = stock[tokens], rewritten.reshape(-1, rewritten.shape[-1])[places]
    if stock.shape != rewritten.shape:
        return f"packed outputs have shape {tuple(rewritten.shape)}, stock {tuple(stock.shape)}"
    tolerance = 1e-4 if stock.dtype == torch.float32 else 2e-2
    gap, scale = (stock.float() - rewritten.float()).abs().max().item(), stock.float().abs().max().item()
    if not gap <= tolerance * max(scale, 1e-6):
        return f"packed outputs differ from stock by up to {gap:.3g} (largest output {scale:.3g})"
    return None


def _unaligned(stock, rewritten, tokens: torch.Tensor) -> str | None:
    """Why the padded and packed logits cannot be compared token by token (not tensors, a per-token output whose
    [B, L] is not the batch's, other ranks), or None."""
    if not (torch.is_tensor(stock) and torch.is_tensor(rewritten)):
        return f"the outputs' logits are {type(stock).__name__} and {type(rewritten).__name__}, not tensors"
    if stock.dim() not in (2, 3):
        return f"the outputs' logits have rank {stock.dim()}, not [sequences, classes] or [batch, length, vocabulary]"
    if stock.dim() == 3 and stock.shape[:2] != tokens.shape:
        return f"the outputs {tuple(stock.shape)} do not line up with the batch's tokens {tuple(tokens.shape)}"
    if stock.dim() == 3 and rewritten.dim() != 3:
        return f"packed outputs have rank {rewritten.dim()}, stock's {stock.dim()}"
    return None


def carries_state(model: nn.Module, spec: PackingSpec) -> bool:
    """Whether the second of two sequences packed into one row gets other outputs when the first one's
    tokens change (Jamba's Mamba layers, linear attention and short convolutions carry state along the row;
    attention under the block-diagonal mask does not). Compared per output, in eval mode: at initialisation
    such a leak moved the loss by only ~1e-5 relative, below the loss check's tolerance."""
    padded = modeling.synthetic_batch(model, [5, 3], seed=2468)  # one row of capacity 8: 5 + 3 tokens
    other = {k: v.clone() for k, v in padded.items()}
    vocab = modeling.vocab_size(model)
    other["input_ids"][0, :5] = 4 + (other["input_ids"][0, :5] - 4 + 1) % max(vocab - 4, 1)  # other ids, none special
    device = next(model.parameters()).device
    first, second = (_packed(batch, spec, device) for batch in (padded, other))
    if first["input_ids"].shape[0] != 1:  # not packed into one row: nothing to compare
        return False
    start = int(first[SEQUENCE_STARTS][1])
    try:
        with training_mode(model, False), torch.no_grad():
            a, b = (model(**batch).logits for batch in (first, second))
    except Exception:
        return False  # the loss check above ran this model packed; a probe that cannot run proves nothing
    if a.dim() == 2 and a.shape[0] == 2:  # [N, C]: one pooled output per sequence
        a, b = a[1], b[1]
    else:  # [R, C, ...] per token: the second sequence's positions
        a, b = (x.reshape(-1, *x.shape[2:])[start : start + 3].float() for x in (a, b))
    return modeling.outputs_differ(a, b)
