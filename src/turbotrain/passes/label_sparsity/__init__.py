"""Label sparsity: run the output head and the loss only on the rows whose label counts.

Contract
--------
Applies to a Transformers model whose loss ignores label -100 and whose output head is found through
`get_output_embeddings()` (masked-LM, causal-LM and seq2seq-LM heads: BERT, RoBERTa, DistilBERT, GPT-2,
Llama, T5, BART, Marian, Whisper...).
In training mode, when the model is called with `labels` of shape [B, T]:

* the kept rows are the positions whose target is not -100. For a causal LM the target of position t
  is `labels[t + 1]` (Transformers shifts inside its loss), so the shift is made here and the model
  receives it as `shift_labels`;
* an encoder-decoder LM (T5, BART, Marian, Whisper) builds its `decoder_input_ids` from the full
  labels when given none, so they are built first, the model's own way (`modeling.decoder_input_ids`),
  and its kept labels go in as [K, 1] (2-D: Whisper reads `labels.shape[1]`; the losses flatten them);
* the hidden states entering the head are gathered, [B, T, H] -> [K, H]; the head returns [K, V];
* the model's own loss code then runs on those K rows with the K labels, so its reduction
  (mean, or sum / `num_items_in_batch`) is the stock one.

Exact: a row whose label is ignored adds nothing to the stock loss and receives a zero gradient, so
dropping it changes only the float summation order of the head's weight gradient (fp32: ~1e-7
relative). Tied embeddings stay tied: no parameter is replaced. A batch with no kept label gives
the stock answer too (NaN loss, zero gradients).

Saved: (B*T - K) / (B*T) of the head's FLOPs and of the logits memory. At 15% masking that is 85%;
at batch 16 x 128 and RoBERTa's vocabulary of 50,265 the stock fp32 logits alone are 412 MB, and
their gradient and softmax as much again each.
Cost: counting the kept rows (`nonzero`) is a host sync on an accelerator, so there TurboTrainer's collator chooses
them on the host instead and the batch carries them (passes/label_sparsity/host_rows.py: same rows, no sync in the
step); on the CPU, and for calls without them, the model chooses them itself. A compiler that needs static shapes (the
xla backend) chooses the rows on the host too, padded to a fixed count with label -100 entries that add nothing to the
loss, and hands them in through `static_rows` (see `kept_rows`).

Head: chosen when the pass is built (`apply_label_sparsity`), never changed after. Either the model's own
head and loss run on the kept rows, or, with `chunked_cross_entropy` (registered as this pass's part: the
registry hands its options to this pass's install), a `ChunkedHead` (passes/chunked_ce/) may take a call over: the labels leave the model call, the output projection computes the loss on the
gathered rows chunk by chunk, and the loss is put on the model's output. TRL's `fused_lm_head` calls are
answered the same way where the chunked head was built to (`fused_head_calls`), else left to TRL
(passes/fused_head_calls.py).

Not applied (the model stays dense, full logits): evaluation and prediction (`model.eval()`; a reference
model's fused calls excepted, passes/label_sparsity/reference_calls.py), calls
without 2-D `labels`, calls that already pass `shift_labels`, models without a vocabulary head
(classifiers: silently, there is nothing to gain). Refused with one warning: a masked or causal LM
whose output embeddings cannot be found, a PEFT prompt-learning model whose virtual tokens are prepended to each
row (prompt tuning, p-tuning: `modeling.prompt_learning`; the head sees more rows than the labels have), and
models where the self-check fails. The self-check runs the model once dense
and once sparse on a tiny synthetic batch (in eval mode, with its own RNG so training RNG is untouched),
each with its backward, under the run's autocast (self_check.check_under_run_precision), and compares the
losses and looks for NaN/inf gradients; any model whose head or loss does not fit this contract fails it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from turbotrain.boundaries import liger_boundary
from turbotrain.modeling import (
    IGNORE_INDEX,
    decoder_input_ids,
    decoder_length_limit,
    is_causal_lm,
    is_language_model,
    is_seq2seq_lm,
    module_or_none,
    prompt_learning,
)
from turbotrain.passes import chunked_ce, fused_head_calls
from turbotrain.passes.chunked_ce import ChunkedHead
from turbotrain.passes.installed import HookedPass
from turbotrain.passes.label_sparsity import host_rows
from turbotrain.passes.label_sparsity.host_rows import labelled_rows, shifted_targets
from turbotrain.passes.label_sparsity.reference_calls import answer_reference_calls
from turbotrain.passes.registry import PassOptions, Setup, StepPlace, TrainerFacts, option, register_pass
from turbotrain.passes.self_check import check_forced, never_raises
from turbotrain.utils.batch_keys import HOST_ROWS_KEYS
from turbotrain.utils.warnings import warn_once


@dataclass
class HeadLocation:
    """Where the rows are gathered: `module` receives hidden states [B, T, H] as its first argument."""

    module: nn.Module
    name: str
    causal: bool
    seq2seq: bool = False


def _has_active_dropout(module: nn.Module) -> bool:
    return any(isinstance(m, nn.Dropout) and m.p > 0 for m in module.modules())


def find_head(model: nn.Module) -> HeadLocation | None:
    """Locate the module that turns hidden states into logits, from `get_output_embeddings()`.

    The gather point is the top-level child that holds the output embeddings (RoBERTa's `lm_head`,
    BERT's `cls`), so the head's per-row transform is skipped too, unless that child is the whole base
    model or contains dropout (a smaller input would change dropout's random draws); then the output
    embeddings themselves are the gather point (DistilBERT's `vocab_projector`, GPT-2's `lm_head`).
    """
    output = module_or_none(model, "get_output_embeddings")
    if output is None:
        return None
    name = next((n for n, m in model.named_modules() if m is output), None)
    if not name:
        return None
    top_name = name.split(".")[0]
    top = getattr(model, top_name)
    base = getattr(model, "base_model", None)
    module, where = (top, top_name)
    if top is base or _has_active_dropout(top):
        module, where = (output, name)
    return HeadLocation(module=module, name=where, causal=is_causal_lm(model), seq2seq=is_seq2seq_lm(model))


def kept_rows(labels: torch.Tensor, causal: bool, padded_count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`labelled_rows` padded to `padded_count` entries (row 0, label -100) for static shapes.

    Returns (rows [padded_count] int32, kept labels [padded_count]) for `LabelSparsity.static_rows`.
    """
    rows, targets = labelled_rows(labels, causal)
    if rows.numel() > padded_count:
        raise ValueError(f"{rows.numel()} labelled rows do not fit in {padded_count}")
    padded_rows = torch.zeros(padded_count, dtype=torch.int32)
    padded_rows[: rows.numel()] = rows.to(torch.int32)
    kept = torch.full((padded_count,), IGNORE_INDEX, dtype=labels.dtype)
    kept[: rows.numel()] = targets
    return padded_rows, kept


class ScoredCallPacker(Protocol):
    """What label sparsity asks of a packer of its fused calls (padding_free/scored_calls.py; no import of it)."""

    def pack(self, args: tuple, kwargs: dict, rows: torch.Tensor) -> tuple[dict, torch.Tensor, int] | None: ...

    def finish(self) -> None: ...

    def end_forward(self) -> None: ...

    def remove(self) -> None: ...


# The rows each installed pass chose for the call in progress, by pass. A module global, not an attribute
# of the pass: the head's hook is reached through the head module (often a builtin nn.Linear), and Dynamo
# treats every tensor reached through a builtin module as static-shaped, so a kept-row count read from the
# pass would be a constant to a compiled model, which then recompiled on every step (measured on Whisper
# and GPT-2 with varied label lengths: a recompile per step). Read from here, it is a dynamic-shaped input.
_ROWS_IN_USE: dict[int, torch.Tensor] = {}


class LabelSparsity(HookedPass):
    """The installed pass: hooks on the model and its head, removable with `remove()`."""

    def __init__(self, model: nn.Module, head: HeadLocation, chunked_head: ChunkedHead | None = None):
        super().__init__()
        self.model = model
        self.head = head
        self.chunked_head = chunked_head  # takes the head and loss over for the calls it wants; None: the model's own
        self._key = id(self)
        self._expected_rows = 0
        self._forced = False
        self._given: tuple[torch.Tensor, torch.Tensor] | None = None
        self.fused_calls_in_eval = False  # a reference model (in eval mode): its fused calls answered too
        self.reference: LabelSparsity | None = None  # the trainer's reference model's, answered as this one's
        # packs the fused calls' padded rows into one row inside the call (padding_free/scored_calls.py), or None
        self.call_packer: ScoredCallPacker | None = None
        self._handles = [
            model.register_forward_pre_hook(self._select_rows, with_kwargs=True),
            model.register_forward_hook(self._clear_rows, always_call=True),
            head.module.register_forward_pre_hook(self._gather_rows),
        ]

    @contextlib.contextmanager
    def forced(self):
        """Apply the pass even in eval mode (for the self-check)."""
        self._forced = True
        try:
            yield
        finally:
            self._forced = False

    @contextlib.contextmanager
    def static_rows(self, rows: torch.Tensor, kept: torch.Tensor):
        """Use rows chosen outside the model for the calls inside: `rows` [K] index the flattened [B*T]
        positions, `kept` [K] are their targets (already shifted for a causal LM); padding entries carry
        label -100. For compilers that need static shapes; see `kept_rows`."""
        self._given = (rows, kept)
        try:
            yield
        finally:
            self._given = None

    def _select_rows(self, module, args, kwargs):
        kwargs, given = host_rows.split(kwargs)  # the collator's kept rows (host_rows.py) never reach the model
        selected = self._sparse_call(module, args, kwargs, given)
        if selected is None and given is not None:
            return args, kwargs
        return selected

    def _sparse_call(self, module, args, kwargs, given):
        labels = kwargs.get("labels")
        fused = fused_head_calls.is_fused_call(kwargs)  # TRL's fused LM head: answered by the chunked head
        active = module.training or self._forced or (fused and self.fused_calls_in_eval)
        if not active or labels is None or labels.dim() != 2:
            return None
        if fused and not fused_head_calls.can_compose(kwargs, self.chunked_head):
            return None
        if "shift_labels" in kwargs or self._longer_than_decoder_accepts(labels):
            return None
        if self._given is not None:
            rows, kept = self._given
        else:
            rows, kept = host_rows.rows_for(given, labels) or labelled_rows(labels, self.head.causal)
        _ROWS_IN_USE[self._key], self._expected_rows = rows, labels.numel()
        if fused:
            targets = shifted_targets(labels, self.head.causal)
            kwargs = self.chunked_head.take(kwargs, kept, fused=(rows, targets))
            packed = self.call_packer.pack(args, kwargs, rows) if self.call_packer is not None else None
            if packed is not None:  # the rows' real tokens as one packed row; the answer stays at [B, T]
                kwargs, _ROWS_IN_USE[self._key], self._expected_rows = packed
            return args, kwargs
        if self.chunked_head is not None and self.chunked_head.wants(kept.numel()):
            return args, self.chunked_head.take(kwargs, kept)
        kwargs = {**kwargs, "labels": kept}
        if self.head.causal:
            kwargs["shift_labels"] = kept
        if self.head.seq2seq:
            kwargs.update(self._decoder_inputs(labels, kwargs), labels=kept.unsqueeze(1))  # [K] -> [K, 1]
        return args, kwargs

    def _longer_than_decoder_accepts(self, labels: torch.Tensor) -> bool:
        """Labels the stock seq2seq forward refuses: step aside so its own error is raised (the sparse [K, 1]
        labels would pass its length check and fail later, less clearly)."""
        limit = self.head.seq2seq and decoder_length_limit(self.model)
        return bool(limit) and labels.shape[1] > limit

    def _decoder_inputs(self, labels: torch.Tensor, kwargs: dict) -> dict:
        """The decoder_input_ids the model would have built from the full labels [B, T] (none if given)."""
        if kwargs.get("decoder_input_ids") is not None or kwargs.get("decoder_inputs_embeds") is not None:
            return {}
        return {"decoder_input_ids": decoder_input_ids(self.model, labels)}

    def _gather_rows(self, module, args):
        rows = _ROWS_IN_USE.get(self._key)
        if rows is None:
            return None
        hidden = args[0]
        # an eager-mode safety net; under torch.compile an int attribute would be guarded on and recompile
        # every step, and the install-time self-check has already validated the head
        if not torch.compiler.is_compiling() and (
            hidden.dim() != 3 or hidden.shape[0] * hidden.shape[1] != self._expected_rows
        ):
            raise RuntimeError(
                f"turbotrain label sparsity: the head '{self.head.name}' received hidden states of shape "
                f"{tuple(hidden.shape)}, not [batch, seq, hidden] matching the labels; disable it with "
                "label_sparsity=False for this model."
            )
        rows = rows.to(hidden.device, non_blocking=True)  # a model split over devices (device_map): the body's last
        gathered = hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows)
        return (gathered, *args[1:])

    def _clear_rows(self, module, args, output):
        _ROWS_IN_USE.pop(self._key, None)
        if self.call_packer is not None:
            self.call_packer.finish()
        if self.chunked_head is not None and self.chunked_head.call is not None:
            return self.chunked_head.finish(output)
        return None

    def end_forward(self) -> None:
        """Drop the rows, the packed call and the chunked head's call a forward that raised left (HookedPass)."""
        _ROWS_IN_USE.pop(self._key, None)
        if self.call_packer is not None:
            self.call_packer.end_forward()
        if self.chunked_head is not None:
            self.chunked_head.drop_call()
        if self.reference is not None:
            self.reference.end_forward()

    @property
    def parts(self) -> dict[str, ChunkedHead]:
        """The passes built as its parts (`PassSpec.part_of`), by name: its chunked head, when it has one."""
        return {chunked_ce.NAME: self.chunked_head} if self.chunked_head is not None else {}

    def remove(self) -> None:
        super().remove()
        if self.chunked_head is not None:
            self.chunked_head.remove()
        if self.call_packer is not None:
            self.call_packer.remove()
            self.call_packer = None
        if self.reference is not None:  # the trainer's reference model's pass (reference_calls.py)
            self.reference.remove()
            self.reference = None


@contextlib.contextmanager
def _trial_sparsity(model: nn.Module, head: HeadLocation, chunked_head: ChunkedHead | None = None):
    """A LabelSparsity for one self-check, removed afterwards."""
    trial = LabelSparsity(model, head, chunked_head)
    try:
        yield trial
    finally:
        trial.remove()


@never_raises
def self_check(model: nn.Module, installed: LabelSparsity) -> str | None:
    """Compare dense and sparse loss on a tiny batch; return a description of a mismatch, or None."""
    return check_forced(model, installed.forced, [9, 9], "sparse", seed=1234, ignore_every=2)  # half ignored


def _virtual_rows(model: nn.Module) -> str | None:
    """Why the rows kept from the labels [B, T] would not be the head's rows: a PEFT prompt-learning adapter that
    prepends virtual tokens (prompt tuning, p-tuning) hands the head [B, virtual + T, H]; None otherwise (prefix
    tuning's virtual tokens are in the cache: the head's rows are the labels')."""
    prompt = prompt_learning(model)
    if prompt is None or prompt.in_cache:
        return None
    return f"{prompt}, so the head's rows would not line up with the rows kept from the labels"


def apply_label_sparsity(
    model: nn.Module, check: bool = True, chunked_cross_entropy: str = "never", fused_head_calls: bool | str = False
) -> LabelSparsity | None:
    """Install label sparsity on `model`; return the installed pass, or None (with one warning).

    Its head is chosen here: the chunked head where `chunked_cross_entropy` ("auto", "always", "never")
    asks for it and it checks out (passes/chunked_ce/; answering TRL's fused_lm_head calls too with
    `fused_head_calls`), else the model's own head on the kept rows."""
    model_name = type(model).__name__
    head = find_head(model)
    if head is None:
        if is_language_model(model):  # a classifier has no vocabulary head: nothing to gain, nothing to say
            warn_once(f"turbotrain: label sparsity left {model_name} dense: it has no output embeddings to gather at.")
        return None
    problem = _virtual_rows(model)
    if problem is not None:
        warn_once(f"turbotrain: label sparsity left {model_name} dense: {problem}.")
        return None
    if check:
        with _trial_sparsity(model, head) as trial:
            problem = self_check(model, trial)
        if problem is not None:
            warn_once(f"turbotrain: label sparsity left {model_name} dense: {problem}.")
            return None

    def check_chunked(chunked_head: ChunkedHead) -> str | None:
        with _trial_sparsity(model, head, chunked_head) as trial:
            return chunked_ce.self_check(model, trial)

    chunked_head = chunked_ce.apply_chunked_ce(
        model, chunked_cross_entropy, fused_head_calls=fused_head_calls, check_with=check_chunked if check else None
    )
    return LabelSparsity(model, head, chunked_head)


# --- registration (passes/registry.py) ---------------------------------------------------------------


LIGER_FORWARD = (
    "use_liger_kernel=True: Liger's fused linear cross-entropy replaces the model's forward with its own head and "
    "loss; liger_kernel_config={'fused_linear_cross_entropy': False} keeps turbotrain's"
)


def trainer_refusal(trainer, facts: TrainerFacts) -> str | None:
    """Why `trainer` leaves the head and its loss stock: Liger's forward takes them (it hands the hidden states and
    the head's weight to its own fused loss and never calls the head, so the kept rows would meet every row's
    hidden state), or the loss reads the full logits (`reads_full_logits`)."""
    if "forward" in liger_boundary.liger_replaces(getattr(trainer, "model", None), trainer.args):
        return LIGER_FORWARD
    return reads_full_logits(trainer, facts)


def reads_full_logits(trainer, facts: TrainerFacts) -> str | None:
    """Why `trainer`'s loss needs the full logits (label smoothing, a custom `compute_loss_func`), or None. (A TRL
    trainer whose scored calls turbotrain does not answer refuses it by its facts: integrations/trl/.) Smoothing is
    what Trainer's `__init__` left on: its `label_smoother` (None where it turned `label_smoothing_factor` off, as
    for multi-label classification)."""
    smooths = getattr(trainer, "label_smoother", trainer.args.label_smoothing_factor or None) is not None
    if not smooths and getattr(trainer, "compute_loss_func", None) is None:
        return None
    warn_once(
        "turbotrain: label sparsity is off for this run: label smoothing or a custom compute_loss_func "
        "reads the full logits."
    )
    return "label smoothing or a custom compute_loss_func reads the full logits"


def _install(model: nn.Module, setup: Setup) -> LabelSparsity | None:
    """Label sparsity with its chunked head when that is on, answering TRL's fused calls as the trainer's facts say
    (at their temperature), and the trainer's own reference model's calls the same way (reference_calls.py)."""
    chunked = setup.parts.get(chunked_ce.NAME)  # the chunked head's options, handed over when it is on (part_of)
    mode = chunked.chunked_cross_entropy if chunked is not None else "never"
    facts = setup.facts
    installed = apply_label_sparsity(model, setup.check, mode, fused_head_calls=facts.fused_call_weighting or False)
    if installed is not None and installed.chunked_head is not None:
        installed.chunked_head.temperature = facts.fused_call_temperature  # GRPO's and RLOO's sampling temperature
        installed.reference = answer_reference_calls(facts.reference_model, installed, apply_label_sparsity)
    return installed


def host_rows_step(installed: LabelSparsity, inner, place: StepPlace):
    """Label sparsity's collator step: the kept rows chosen on the host where the step would wait for them
    (passes/label_sparsity/host_rows.py: on an accelerator, inside Trainer's loop), else `inner` as it is."""
    return host_rows.HostRowsCollator(inner, installed.head.causal) if host_rows.wanted(place) else inner


@register_pass(
    order=10,
    install=_install,
    refused_by_trainer=trainer_refusal,
    refused_for=is_language_model,  # a classifier has no vocabulary head: nothing to refuse
    collator=host_rows_step,
    batch_keys=HOST_ROWS_KEYS,
)
@dataclass(frozen=True)
class LabelSparsityOptions(PassOptions):
    """Compute the output head and loss only on rows whose label is not -100 (exact; passes/label_sparsity/)."""

    label_sparsity: bool = option(True)
