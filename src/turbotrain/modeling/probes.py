"""What the model does, asked of the model itself: tiny no-grad forwards (one training-mode forward and
backward for `draws_at_random`) of the base model on a few token ids, for what its classes and config
do not say.

* `attends_ahead(model)`, `reads_masked_positions(model)`: what one tiny no-grad forward of the base model
  shows (None where it cannot run on `input_ids`): whether the first position sees the last token (causal
  or not, for layers without `is_causal` flags), and whether real tokens see the ids the attention mask
  hides (ConvBERT's convolution, MobileBERT's trigram embedding, FNet), which padding-free cannot pack.
* `has_causal_attention(model)`: whether attention is causal whatever the head (a decoder classifier too;
  not BERT's causal-LM head on a config without `is_decoder`, which attends both ways); the layers'
  flags first, `attends_ahead` where they have none.
* `draws_at_random(model)`: whether a training-mode step draws random numbers (dropout, sampled routing).

Each probe runs in eval or training mode as it needs and puts the model's own mode back; the caller's
random streams and the parameters' gradients are left as they were. A model that cannot be run on
`input_ids` answers None, never raises.
"""

from __future__ import annotations

import torch
from torch import nn

from turbotrain.boundaries.torch_boundary import TorchDispatchMode, op_arguments
from turbotrain.modeling.parts import module_or_none, vocab_size
from turbotrain.modeling.tasks import is_causal_lm, unwrap
from turbotrain.utils.mode import training_mode


def has_causal_attention(model: nn.Module) -> bool:
    """True when the model's attention layers are causal, whatever its head.

    Its layers' `is_causal` and `is_decoder` flags decide where they have them: causal if any says so, not
    if all say no. An encoder family's causal-LM head on a config without `is_decoder` (`BertLMHeadModel`,
    `BigBirdForCausalLM`: Transformers warns and keeps attention bidirectional) is not causal, though its
    loss still shifts the labels. Layers without flags (BLOOM, MPT: causal whatever the head) are asked
    by `attends_ahead`; where that cannot run, the config's `is_decoder`, else the causal-LM head."""
    inner = unwrap(model)
    flags = [
        flag
        for module in inner.modules()
        if module is not inner
        for flag in (getattr(module, "is_causal", None), getattr(module, "is_decoder", None))
        if isinstance(flag, bool)
    ]
    if flags:
        return any(flags)
    ahead = attends_ahead(inner)
    if ahead is not None:
        return not ahead
    return bool(getattr(inner.config, "is_decoder", False)) or is_causal_lm(inner)


def _base_outputs(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor] | None:
    """The base model's first output [1, T, ...] for each row of `ids` [N, T] (no grad, eval mode), or None
    if the base model cannot be run on `input_ids` (an encoder-decoder, a model of other inputs)."""
    inner = unwrap(model)
    base = getattr(inner, "base_model", inner)
    device = next(inner.parameters()).device
    try:
        with training_mode(inner, False), torch.no_grad():
            return [
                base(input_ids=row[None].to(device), attention_mask=mask[None].to(device))[0].float() for row in ids
            ]
    except Exception:
        return None


class _RandomOpRecorder(TorchDispatchMode):
    """Notes whether any ATen op that draws from a random generator runs (tagged `nondeterministic_seeded`:
    dropout's bernoulli, rand, exponential_, ...)."""

    def __init__(self):
        super().__init__()
        self.drew = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.drew = self.drew or (torch.Tag.nondeterministic_seeded in func.tags and _draws(func, args, kwargs))
        return func(*args, **kwargs)


def _draws(func, args: tuple, kwargs: dict) -> bool:
    """A seeded op draws unless its dropout probability (`p`, `dropout_p`: SDPA's kernels, native_dropout)
    is 0: SDPA in every model is a seeded op, called with dropout_p=0 where the model has no dropout."""
    for position, argument in enumerate(op_arguments(func)):
        if argument.name in ("p", "dropout_p"):
            value = args[position] if position < len(args) else kwargs.get(argument.name, argument.default_value)
            return value != 0
    return True


def draws_at_random(model: nn.Module, length: int = 6) -> bool | None:
    """Whether the base model draws random numbers in training mode: a training-mode forward and backward of a
    few tokens runs an op that draws from a random generator (dropout; PhiMoE's sampled expert routing, which
    draws whether or not the draw changes the result at this input). The gradient is taken with respect to
    the input embeddings only, so no parameter gradient is made or touched, and the caller's random streams
    are left as they were (forked). None if the base model cannot run this way."""
    inner = unwrap(model)
    base = getattr(inner, "base_model", inner)
    vocab, embedding = vocab_size(model), module_or_none(base, "get_input_embeddings")
    if vocab is None or embedding is None:
        return None
    device = next(inner.parameters()).device
    ids = (torch.arange(4, 4 + length) % vocab)[None].to(device)
    recorder = _RandomOpRecorder()
    try:
        with training_mode(inner, True), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            with recorder:
                with torch.no_grad():
                    embeds = embedding(ids)
                embeds.requires_grad_()
                output = base(inputs_embeds=embeds, attention_mask=torch.ones_like(ids))[0]
                torch.autograd.grad(output.float().square().mean(), embeds)
    except Exception:
        return None
    return recorder.drew


def outputs_differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two outputs of probe forwards differ beyond float noise (1e-6 of the first's largest value)."""
    return bool((a - b).abs().max().item() > 1e-6 * a.abs().max().item())


def attends_ahead(model: nn.Module, length: int = 6) -> bool | None:
    """Whether the base model's first output position changes when only the last token does (one tiny
    forward, [1, length] ids); None if the base model cannot be run on `input_ids`."""
    vocab = vocab_size(model)
    if vocab is None:
        return None
    ids = torch.arange(4, 4 + length).repeat(2, 1) % vocab  # [2, T]: the second row's last token differs
    ids[1, -1] = (ids[0, -1] + 1) % vocab
    outputs = _base_outputs(model, ids, torch.ones(length, dtype=torch.long))
    return None if outputs is None else outputs_differ(outputs[0][:, 0], outputs[1][:, 0])


def reads_masked_positions(model: nn.Module, length: int = 6, padding: int = 3) -> bool | None:
    """Whether the base model's outputs at real tokens change with the ids at positions the attention mask
    hides (ConvBERT's span convolutions mix neighbouring tokens outside attention); None if it cannot run."""
    vocab = vocab_size(model)
    if vocab is None:
        return None
    ids = torch.arange(4, 4 + length + padding).repeat(2, 1) % vocab  # [2, T]: other ids under the mask
    ids[1, length:] = (ids[0, length:] + 7) % vocab
    mask = (torch.arange(length + padding) < length).long()
    outputs = _base_outputs(model, ids, mask)
    return None if outputs is None else outputs_differ(outputs[0][:, :length], outputs[1][:, :length])
