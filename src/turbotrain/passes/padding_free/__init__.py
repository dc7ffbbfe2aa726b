"""Padding-free training: train on packed rows (packing.py) instead of padded batches, exactly.

Contract
--------
Mask modes, the self-check and the refusals in full: docs/padding-free.md. Supported: masked-LM, causal-LM and
token-classification models of any family, and encoder sequence classification (BERT, RoBERTa, DistilBERT, ...),
on SDPA, eager, flash or flex attention. Nothing in the model's code changes: the batch carries `position_ids`
that restart per sequence, and each sequence's attention is kept to the sequence, so each sequence sees exactly
what it saw alone in its padded row, and the loss is the same token-weighted loss. The mask mode is the first of
`mask_modes` whose self-check passes: "sequences" (no mask: SDPA and eager models switched onto
packed_attention.py, flash models on Transformers' varlen path, both reading `cu_seq_lens_q`; rows of up to
`row_tokens` tokens; `remove()` switches back), "block" (one block-diagonal mask), "positions" (causal models
with windows or chunks: the model's own `masking_utils` masks each layer from the restarting `position_ids`,
`use_cache=False`) or "layers" (one mask per `config.layer_types` kind, layer_masks.py). One block-diagonal mask
for every layer would let a sliding layer see its whole sequence (Gemma-3: losses 1e-3 off stock).

Sequence classification pools one output per sequence: a hook gathers each sequence's first token,
[R, C, H] -> [N, 1, H], where the model pools (the base model's `pooler` input if it has one, else the
base model's output), so the classifier sees the N pooled rows the padded batch would give. Only causal LMs
lose each sequence's first label in the packed rows (their shifted loss never reads it).

Exact: same loss and gradients as the padded batch up to float summation order (fp32 ~1e-6), for a
model without dropout. With dropout the packed tensors have other shapes than the padded ones, so
dropout would draw other masks: the same distribution, not the same numbers step by step (run_glue.py
and TRL's sft.py with default dropout differed from stock by ~1e-2). So a model that trains with
dropout, or draws other random numbers in training (PhiMoE's sampled expert routing; found by the
seeded ATen ops one tiny training-mode forward and backward runs, `modeling.draws_at_random`), is refused (one
warning naming the option) unless `with_dropout=True` (`padding_free_with_dropout=True`) asks for packing anyway.
Trainer features that draw random numbers per padded position step padding-free aside for the run (one log
line, named in the summary; `trainer_refusal`): NEFTune (`neftune_noise_alpha`) adds uniform noise of scale
`alpha / sqrt(L * d)` to the embeddings, with L the batch's padded length, drawn in the batch's shape, and
Trainer adds its hook in `train()`, after the passes: a packed row's L (the whole batch's tokens) made the noise
0.45x stock's at batch 8, and no option packs anyway. Losses with NEFTune equal stock's step by step. So does
`include_num_input_tokens_seen` on Transformers < 5.3, which counts the tokens inline in its loop on the batch as
packed (from 5.3 the trainer hands its hook the padded batch's count: `turbo_count_inputs`).

Refused (one warning, the model trains padded): PEFT prompt learning (`modeling.prompt_learning`: PEFT drops the
restarting `position_ids`), decoder sequence classification (it pools the last non-pad token of each padded row),
other tasks (QA, multiple choice: their labels are positions in the padded row), other attention implementations,
models whose outputs at real tokens read the ids under the mask (`modeling.reads_masked_positions`: ConvBERT, by
~1e-5 relative, below the self-check's tolerance), models that carry state along a row (`carries_state`: Mamba
layers, linear attention), and any model whose self-check (check.py: padded vs packed, every token) disagrees.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, replace

import torch
from torch import nn

from turbotrain import modeling
from turbotrain.boundaries import hf_boundary
from turbotrain.passes.installed import HookedPass
from turbotrain.passes.padding_free import kernel_choice
from turbotrain.passes.padding_free.check import (  # noqa: F401  (re-exported: the pass's self-check)
    _packed,
    carries_state,
    check_lengths,
    compare_token_outputs,
    self_check,
)
from turbotrain.passes.padding_free.layer_masks import layer_masks, unsupported_layer_types
from turbotrain.passes.padding_free.packed_attention import AttentionSwitch
from turbotrain.passes.padding_free.packing import PackingSpec, pack_batch
from turbotrain.passes.registry import CollatorStep, PassOptions, TrainerFacts, batch_tensor, option, register_pass
from turbotrain.utils.batch_keys import ATTENTION_SEQUENCES, PACKED_SEQUENCES, PACKING_KEYS, SEGMENTS, SEQUENCE_STARTS
from turbotrain.utils.warnings import warn_once

logger = logging.getLogger("turbotrain")

MASKED_ATTENTION = {"sdpa", "eager"}
ATTENTION_CHOICES = ("packed", "masks")  # the packed-attention function where it applies, or masks only


@dataclass
class PackingCollator(CollatorStep):
    """Wraps a padding collator: collate as before (same masking draws), then pack the result."""

    spec: PackingSpec

    def step(self, batch):
        mask = batch_tensor(batch, "attention_mask")
        if mask is None or mask.dim() != 2:
            return batch
        return pack_batch(dict(batch), self.spec)


def _task(model: nn.Module) -> str | None:
    task = modeling.task_of(model)
    if task == modeling.SEQUENCE_CLASSIFICATION:
        return "sequence_classification"
    return "per_token" if task in modeling.PER_TOKEN_TASKS else None


def packing_spec(
    model: nn.Module, multiple_of: int = 8, mask: str | None = None, row_tokens: int | str = "longest"
) -> PackingSpec:
    """What packing must know of `model`; `mask`: the mask mode (default: the first mask mode of `mask_modes`)."""
    causal = modeling.has_causal_attention(model)
    return PackingSpec(
        causal=causal,
        pad_token_id=modeling.pad_token_id(model),
        position_offset=modeling.position_offset(model),
        multiple_of=multiple_of,
        shifted_labels=modeling.is_causal_lm(model),  # a decoder's token classifier: no shift
        mask=mask or mask_modes(model, causal, attention="masks")[0],
        rope_rule=modeling.length_dependent_rope(model),
        row_tokens=row_tokens,
    )


def mask_modes(model: nn.Module, causal: bool, attention: str = "packed") -> list[str]:
    """The mask modes to try for `model`, best first (module docstring): "sequences" first for SDPA and eager
    models (unless `attention="masks"`), then "block" unless its layers window or chunk attention."""
    family = attention_family(_implementation(model))
    if family == "flash":
        return ["sequences"]
    masked = ["positions", "layers"] if causal else ["layers"]
    if not modeling.attention_spans(model):
        masked = ["block"] if family == "masked" else masked
    packed = ["sequences"] if family == "masked" and attention == "packed" else []
    return packed + masked


def attention_family(implementation: str | None) -> str | None:
    """The kind of attention `implementation` is: "masked" (SDPA, eager), "flash" (flash attention 2/3/4, flash
    kernels), "flex", or None (none packing keeps exact)."""
    if implementation in MASKED_ATTENTION:
        return "masked"
    if implementation and "flash" in implementation and not implementation.startswith("paged|"):
        return "flash"
    return "flex" if implementation == "flex_attention" else None


def _takes(module: nn.Module, name: str) -> bool:
    try:
        return name in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


class PaddingFree(HookedPass):
    """The installed pass: the packing spec, and hooks that route per-sequence pooling."""

    def __init__(self, model: nn.Module, spec: PackingSpec, pools: bool, attention: AttentionSwitch | None = None):
        super().__init__()
        self.model, self.spec, self.attention = model, spec, attention
        self._starts: torch.Tensor | None = None
        self._handles = [
            model.register_forward_pre_hook(self._take_starts, with_kwargs=True),
            model.register_forward_hook(self._clear, always_call=True),
        ]
        if pools:
            self._handles.append(self._install_pool_gather(model))

    def collator(self, inner) -> PackingCollator:
        return PackingCollator(inner, self.spec)

    @property
    def label(self) -> str:
        """Its name in the run's summary: with the packed-attention kernels chosen in this process so far."""
        kernels = kernel_choice.chosen_kernels() if self.attention is not None else []
        return f"padding_free (attention: {', '.join(kernels)})" if kernels else "padding_free"

    def remove(self) -> None:
        super().remove()
        if self.attention is not None:
            self.attention.restore()
            self.attention = None

    def _install_pool_gather(self, model: nn.Module):
        base = model.base_model
        pooler = getattr(base, "pooler", None)
        if pooler is not None:
            return pooler.register_forward_pre_hook(lambda m, args: (self._gather(args[0]), *args[1:]))
        return base.register_forward_hook(self._gather_base_output)

    def _gather(self, hidden: torch.Tensor) -> torch.Tensor:
        if self._starts is None:
            return hidden
        return hidden.reshape(-1, hidden.shape[-1]).index_select(0, self._starts).unsqueeze(1)

    def _gather_base_output(self, module, args, output):
        if self._starts is None:
            return None
        if isinstance(output, tuple):
            return (self._gather(output[0]), *output[1:])
        output.last_hidden_state = self._gather(output.last_hidden_state)
        return output

    def _take_starts(self, module, args, kwargs):
        if SEQUENCE_STARTS not in kwargs:
            return None
        self._starts, segments, given = kwargs[SEQUENCE_STARTS], kwargs[SEGMENTS], kwargs
        kwargs = {k: v for k, v in kwargs.items() if k not in PACKING_KEYS}
        mask, dtype = kwargs.get("attention_mask"), next(module.parameters()).dtype
        if self.spec.mask == "sequences":
            self._sequences(module, kwargs, segments, given, dtype)
        elif self.spec.mask == "positions":  # the model masks each layer from the restarting position_ids
            kwargs.pop("attention_mask", None)
            kwargs["use_cache"] = False
        elif self.spec.mask == "layers":
            kwargs["attention_mask"] = self._layer_masks(modeling.unwrap(module), kwargs, segments, dtype)
        elif mask is not None and mask.dim() == 4 and hf_boundary.attention_implementation(module.config) == "eager":
            kwargs["attention_mask"] = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
                ~mask, torch.finfo(dtype).min
            )
        return args, kwargs

    @torch.compiler.disable  # reads this batch's lengths: traced, it would recompile for every batch
    def _sequences(self, module, kwargs: dict, segments, given: dict, dtype) -> None:
        """No mask: the attention keeps to each sequence (packed_attention.py, or flash attention's varlen path
        on `cu_seq_lens_q`). A model switched to another attention after install is followed (sdpa, eager), or
        given per-layer masks (one warning)."""
        inner = modeling.unwrap(module)
        if _takes(inner, "use_cache"):
            kwargs["use_cache"] = False
        if self.attention is not None and self.attention.follow():
            kwargs[ATTENTION_SEQUENCES] = given[PACKED_SEQUENCES].to(segments.device)  # the [R, C] mask stays, unused
            self.attention.mark_packed()
        elif attention_family(_implementation(inner)) == "flash":
            kwargs.pop("attention_mask", None)
        else:
            warn_once(
                f"turbotrain: padding-free: the model's attention became '{_implementation(inner)}' after "
                "install; packed rows get per-layer masks"
            )
            kwargs["attention_mask"] = self._layer_masks(inner, kwargs, segments, dtype)

    def _layer_masks(self, inner: nn.Module, kwargs: dict, segments, dtype):
        positions = kwargs["position_ids"] - self.spec.position_offset
        return layer_masks(inner.config, segments, positions, dtype, modeling.layer_types(inner), self.spec.causal)

    def _clear(self, module, args, output):
        if self.attention is not None:
            self.attention.unmark()
        self._starts = None

    def end_forward(self) -> None:
        """Drop the sequence starts and every packed forward a forward that raised left open (HookedPass)."""
        if self.attention is not None:
            self.attention.end_open_forwards()
        self._starts = None


def _refusal(model: nn.Module, task: str | None, spec: PackingSpec, probe: bool = True) -> str | None:
    prompt = modeling.prompt_learning(model)
    if prompt is not None:
        return f"{prompt}, and packed rows' positions and sequence starts would not line up with them"
    if task is None:
        return "its task is not masked-LM, causal-LM, token or sequence classification"
    if task == "sequence_classification" and spec.causal:
        return "decoder sequence classification pools the last non-pad token of each padded row"
    implementation = _implementation(model)
    if attention_family(implementation) is None:
        return (
            f"its attention implementation '{implementation}' is not one packing keeps exact (sdpa, eager, flash, flex)"
        )
    if probe and modeling.reads_masked_positions(model):
        return "its outputs read tokens its attention mask hides (a convolution over the sequence), so packed neighbours would change them"
    return None


def refusal_of_model(model: nn.Module, spec: PackingSpec, probe: bool = True) -> str | None:
    """Why packing cannot keep `model` exact whatever the mask mode (its task, attention, reads under the mask,
    random draws in training), or None; scored_calls.py asks it too. `probe=False` leaves out the two answers that
    run the model (`modeling.reads_masked_positions`, `draws_at_random`), for a model of the same class and
    configuration as one already probed: a forward touches every weight, which for a reference model loaded from
    a file maps all of it into memory before training needs it."""
    return _refusal(model, _task(model), spec, probe) or _random_draws_refusal(model, probe)


def _mask_refusal(model: nn.Module, spec: PackingSpec) -> str | None:
    """Why `spec.mask` cannot mask this model's packed rows, or None."""
    if spec.mask == "positions" and not _takes(modeling.unwrap(model), "position_ids"):
        return "its layers window or chunk attention and it takes no position_ids to mask each packed sequence by"
    if spec.mask == "layers":  # without layer types: one rule for every layer, one mask (flex's block mask)
        kinds = modeling.layer_types(model)
        windowed = not kinds and modeling.attention_spans(model)
        unknown = ["no config.layer_types"] if windowed else unsupported_layer_types(kinds, spec.causal)
        if unknown:
            return f"its layers window attention in a way packing cannot mask ({', '.join(unknown)})"
    return None


def _install_exact(model: nn.Module, task: str, specs: list[PackingSpec], check: bool):
    """(the installed pass, None) for the first spec that masks this model exactly, else (None, why not)."""
    problems = []
    for spec in specs:
        problem = _mask_refusal(model, spec)
        switch = None
        if problem is None and spec.mask == "sequences" and attention_family(_implementation(model)) == "masked":
            switch, problem = AttentionSwitch.apply(model)
        if problem is None:
            installed = PaddingFree(model, spec, pools=task == "sequence_classification", attention=switch)
            problem = self_check(model, installed, task) if check else None
            if problem is None:
                return installed, None
            installed.remove()
        problems.append(problem if len(specs) == 1 else f"{spec.mask} masks: {problem}")
    return None, "; ".join(problems)


def _implementation(model: nn.Module) -> str | None:
    return hf_boundary.attention_implementation(modeling.unwrap(model).config)


def apply_padding_free(
    model: nn.Module,
    check: bool = True,
    multiple_of: int = 8,
    with_dropout: bool = False,
    row_tokens: int | str = "auto",
    attention: str = "packed",
) -> PaddingFree | None:
    """Install padding-free training on `model`; return the pass, or None (with one warning).

    A model that trains with dropout is refused unless `with_dropout` (packed rows draw other masks).
    `row_tokens` ("auto", "longest" or a number): row capacity with packed attention (packing.py);
    `attention`: "packed" tries the packed-attention function first, "masks" only the mask modes."""
    if attention not in ATTENTION_CHOICES:
        raise ValueError(f"attention must be one of {ATTENTION_CHOICES}, not {attention!r}")
    name = type(model).__name__
    if not hasattr(model, "config") or not hasattr(model, "base_model"):
        warn_once(f"turbotrain: padding-free left {name} padded: it is not a Transformers model.")
        return None
    task, spec = _task(model), packing_spec(model, multiple_of, row_tokens=row_tokens)
    problem = _refusal(model, task, spec) or (None if with_dropout else _random_draws_refusal(model))
    installed = None
    if problem is None:
        specs = [replace(spec, mask=mode) for mode in mask_modes(model, spec.causal, attention)]
        installed, problem = _install_exact(model, task, specs, check)
    if problem is not None:
        warn_once(f"turbotrain: padding-free left {name} padded: {problem}.")
        return None
    rate = modeling.dropout_rate(model)
    if rate > 0:  # asked for with dropout on: say once what that means
        logger.info(
            "turbotrain: padding-free packs %s's padded batches with dropout on (p=%g), as asked: packed rows draw "
            "other dropout masks, so losses follow stock's in distribution, not step by step",
            name,
            rate,
        )
    return installed


def _random_draws_refusal(model: nn.Module, probe: bool = True) -> str | None:
    """Why packing would change the numbers of a model that draws random numbers in training, or None."""
    rate = modeling.dropout_rate(model)
    if rate > 0:
        what = f"dropout (p={rate:g})"
    elif probe and modeling.draws_at_random(model):
        what = "random draws (e.g. sampled expert routing)"
    else:
        return None
    return (
        f"it trains with {what}, and packed rows would draw other random numbers than the padded batch, so "
        "losses would differ from stock step by step; padding_free_with_dropout=True packs anyway (the same "
        "distribution, the speed of packing)"
    )


# --- registration (passes/registry.py) ---------------------------------------------------------------


def trainer_refusal(trainer, facts: TrainerFacts) -> str | None:
    """Why `trainer` must keep its batches padded: a Trainer feature that reads the batch's shape or draws random
    numbers per padded position (NEFTune), or a loss that reads rows (not a sum over tokens, e.g. DPO's
    chosen/rejected rows) and no scored calls to pack instead (`TrainerFacts`); None to pack."""
    alpha = getattr(trainer.args, "neftune_noise_alpha", None)
    if alpha is not None:
        logger.info("turbotrain: padding-free steps aside: NEFTune's noise is drawn for the padded batch")
        return (
            f"neftune_noise_alpha={alpha}: NEFTune draws its noise in the padded batch's shape, scaled by "
            "alpha / sqrt(length x width), so packed rows would get other and weaker noise than stock"
        )
    if facts.sums_tokens:  # its batches are packed by the collator
        return _counted_inline(trainer)
    if facts.packs_scored_calls:  # packed inside each call (scored_calls.py): the batch Trainer sees stays padded
        return None
    name = type(trainer).__name__
    logger.info(
        "turbotrain: padding-free steps aside: %s computes its own loss, which may read rows (e.g. "
        "chosen/rejected pairs); its batches stay padded",
        name,
    )
    return f"{name} computes its own loss, which may read rows"


def _counted_inline(trainer) -> str | None:
    """Why packed batches would change `num_input_tokens_seen`: a Transformers release (< 5.3) that counts it inline
    in its loop on the batch as packed, where later ones call the hook the trainer answers with the padded count."""
    counted = getattr(trainer.args, "include_num_input_tokens_seen", "no")
    if counted in ("no", False, None) or hf_boundary.counts_input_tokens_by_hook():
        return None
    logger.info("turbotrain: padding-free steps aside: this Trainer counts input tokens on the batch as packed")
    return (
        f"include_num_input_tokens_seen={counted!r}: this Transformers release counts the tokens inside its loop on "
        "the batch as packed (5.3 and later count the padded batch, as stock)"
    )


@register_pass(
    order=30,
    install=lambda model, setup: apply_padding_free(
        model,
        check=setup.check,
        with_dropout=setup.options.padding_free_with_dropout,
        row_tokens=setup.options.padding_free_row_tokens,  # packing.py reads a number given as text
        attention=setup.options.padding_free_attention,
    ),
    refused_by_trainer=trainer_refusal,
    not_applicable=modeling.without_token_input,
    # the batches stay padded where only TRL's scored calls are packed, inside each call (scored_calls.py)
    label=lambda installed: getattr(installed, "label", "padding_free"),
    collator=lambda installed, inner, place: installed.collator(inner),  # packs wherever the step runs
    batch_keys=PACKING_KEYS,
)
@dataclass(frozen=True)
class PaddingFreeOptions(PassOptions):
    """Pack padded training batches into rows with per-sequence attention, where the model is supported and the
    collator pads (exact without dropout; passes/padding_free/)."""

    padding_free: bool = option(True)
    padding_free_with_dropout: bool = option(
        False,
        "Pack padded batches also for a model that trains with dropout. Off by default: packed rows draw other "
        "dropout masks than the padded batch, so losses follow stock's in distribution, not step by step.",
    )
    padding_free_row_tokens: str = option(
        "auto",
        "Tokens per packed row with packed attention (no mask, no C^2 cost per row): 'auto' (the whole batch in one "
        "row), 'longest' (rows as long as the longest sequence), or a number (passes/padding_free/packing.py).",
        choices=("auto", "longest"),
        off="longest",
        numbers=True,
    )
    padding_free_attention: str = option(
        "packed",
        "How packed rows attend within each sequence: 'packed' (the packed-attention function where the model can "
        "use it, masks otherwise; passes/padding_free/packed_attention.py) or 'masks' (per-layer masks only).",
        choices=("packed", "masks"),
        off="masks",
    )
