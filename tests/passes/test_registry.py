"""One registry of passes: a pass registered in one place reaches `optimize`, TurboTrainer (with its options'
defaults), the run's summary, the benchmark's `--turbo-off` list and, with a batch side, the training collator,
with no other file edited; a pass of the package also has its options class among `TurboOptions`' bases
(tests/test_args.py)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest

import turbotrain
from tests.tiny_models import llm
from turbotrain import optimize
from turbotrain.passes import registry
from turbotrain.utils import batch_keys
from turbotrain.utils.batch_keys import SEQUENCE_STARTS

ROOT = Path(__file__).resolve().parents[2]

# Runs in a fresh process, so that the throwaway pass stays out of every other test.
THROWAWAY = '''
import contextlib, io, tempfile
from dataclasses import dataclass

import torch

from turbotrain.passes.registry import PassOptions, PassSpec, option, register_pass

KEY = "throwaway_examples"  # the batch key its collator step adds
SEEN = []  # per call its hook took the key off: (the count, the other passes' batch keys still in the call)


class Mark:
    """The throwaway pass: a flag on the model and a hook that takes its batch key off, undone by remove()."""

    def __init__(self, model):
        self.model = model
        model.marked_by_throwaway = True
        self.handle = model.register_forward_pre_hook(self.take_count, with_kwargs=True)

    def take_count(self, module, args, kwargs):
        if KEY not in kwargs:
            return None
        SEEN.append((int(kwargs[KEY]), sorted(key for key in kwargs if key in PRIVATE_KEYS)))
        return args, {key: value for key, value in kwargs.items() if key != KEY}

    def remove(self):
        self.handle.remove()
        del self.model.marked_by_throwaway


def count_examples(installed, inner, place):
    """Its collator step: the batch's number of examples under KEY."""

    def collate(features):
        batch = inner(features)
        batch[KEY] = torch.tensor(len(features))
        return batch

    return collate


@register_pass(  # named after its switch, ThrowawayOptions' first field
    order=99,
    install=lambda model, setup: Mark(model),
    label=lambda installed: "throwaway (marked)",
    collator=count_examples,
    batch_keys=(KEY,),
)
@dataclass(frozen=True)
class ThrowawayOptions(PassOptions):
    """A pass only this test registers."""

    throwaway: bool = option(True)


# registered under its switch's name, the docstring its help
from turbotrain.passes.registry import get_pass

assert get_pass("throwaway").options_class is ThrowawayOptions
assert get_pass("throwaway").options[0].metadata["help"] == "A pass only this test registers."

from tests.tiny_models import make, padded_batch
from tests.trainer_helpers import turbo_trainer
from turbotrain import optimize
from turbotrain.utils.batch_keys import HOST_ROWS_KEYS, LABEL_ROWS, PACKING_KEYS, SEQUENCE_STARTS
from turbotrain.passes.registry import StepPlace

PRIVATE_KEYS = {*HOST_ROWS_KEYS, *PACKING_KEYS}
from turbotrain.bench.counting import BatchCounter
from turbotrain.bench.workload import BenchData
from turbotrain.bench.workloads import make_workload
from turbotrain.cli import main

# optimize installs it in its order, and undo() removes it
model = make("roberta")
report = optimize(model)
assert report.applied[-1] == "throwaway" and model.marked_by_throwaway and report.throwaway is not None
report.undo()
assert not hasattr(model, "marked_by_throwaway")
assert "throwaway" not in optimize(make("roberta"), throwaway=False).applied  # its option, by name

# its batch side: installed last, its step is the innermost of the training collator, and its hook, which runs
# after label sparsity's and padding-free's (installed first), finds their keys taken off; the model sees none
model = make("llama", dropout=False)
report = optimize(model)
assert {"label_sparsity", "padding_free"} <= set(report.applied) and report.applied[-1] == "throwaway"
batch = report.collator(lambda features: padded_batch([6, 2, 9], keep=0.7), StepPlace("cuda"))([None] * 3)
assert {KEY, LABEL_ROWS, SEQUENCE_STARTS} <= set(batch)  # host rows (as on an accelerator) and packing too
reached = []
model.register_forward_pre_hook(lambda module, args, kwargs: reached.append(sorted(kwargs)), with_kwargs=True)
model(**batch)
assert SEEN == [(3, [])], SEEN
assert not PRIVATE_KEYS.union([KEY]).intersection(reached[0]), reached

# and TurboTrainer's training dataloader: the step's key reaches the hook on every step, then goes
SEEN.clear()
with tempfile.TemporaryDirectory() as tmp:
    from pathlib import Path

    turbo_trainer("llama", Path(tmp), model=make("llama", dropout=False), max_steps=2, backend="eager").train()
assert SEEN == [(4, []), (4, [])], SEEN

# the summary: by its label when active
with tempfile.TemporaryDirectory() as tmp:
    from pathlib import Path

    on = turbo_trainer("roberta", Path(tmp), max_steps=1).turbo_summary()
assert "throwaway (marked)" in on, on

# --turbo-off: the benchmark's passes name it (the CLI's help is a static table: bench/flag_table.py)
from turbotrain.bench.workload import TURBO_PASSES

assert "throwaway" in TURBO_PASSES, TURBO_PASSES
print("throwaway pass seen everywhere")
'''


@pytest.mark.slow
def test_a_pass_registered_in_one_place_reaches_optimize_the_options_the_summary_and_turbo_off(tmp_path):
    src = Path(turbotrain.__file__).resolve().parents[1]  # the turbotrain under test
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)]), "TURBOTRAIN_CACHE": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", THROWAWAY], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert "throwaway pass seen everywhere" in run.stdout


def test_a_pass_is_named_after_its_switch_whose_help_is_the_docstring(monkeypatch):
    monkeypatch.setattr(registry, "_PASSES", dict(registry._PASSES))

    @registry.register_pass(order=98, install=None)
    @dataclasses.dataclass(frozen=True)
    class DocumentedOptions(registry.PassOptions):
        """Its help:   one line
        from two."""

        documented: bool = registry.option(True)
        documented_level: str = registry.option("low", "How much.", choices=("low", "high"))

    spec = registry.get_pass("documented")
    assert spec.options_class is DocumentedOptions and [f.metadata["help"] for f in spec.options] == [
        "Its help: one line from two.",
        "How much.",
    ]

    @dataclasses.dataclass(frozen=True)
    class UndocumentedOptions(registry.PassOptions):
        undocumented: bool = registry.option(True)

    with pytest.raises(ValueError, match="UndocumentedOptions needs a docstring"):
        registry.register_pass(order=97, install=None)(UndocumentedOptions)
    assert "undocumented" not in registry.pass_names()


def test_a_batch_key_two_passes_would_add_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "_PASSES", dict(registry._PASSES))

    @dataclasses.dataclass(frozen=True)
    class SecondPackerOptions(registry.PassOptions):
        second_packer: bool = registry.option(True, "")

    spec = registry.PassSpec(
        "second_packer", SecondPackerOptions, order=99, install=None, batch_keys=(SEQUENCE_STARTS,)
    )
    with pytest.raises(ValueError, match="batch keys another pass adds: \\['turbotrain_sequence_starts'\\]"):
        registry.add_pass(spec)


def test_every_key_a_pass_adds_is_named_in_batch_keys():
    named = {value for name, value in vars(batch_keys).items() if name.isupper() and isinstance(value, str)}
    declared = [key for spec in registry.passes() for key in spec.batch_keys]
    assert declared and set(declared) <= named and len(declared) == len(set(declared))
    assert all(spec.batch_keys for spec in registry.passes() if spec.collator is not None)


def test_one_name_per_pass_everywhere():
    from turbotrain import TurboOptions

    names = registry.pass_names()
    assert {"label_sparsity", "chunked_cross_entropy", "padding_free", "fused_optimizer"} <= set(names)
    assert set(names) <= {f.name for f in fields(TurboOptions)}
    report = optimize(llm(), chunked_cross_entropy="always", padding_free=False)
    assert report.applied[:2] == ["label_sparsity", "chunked_cross_entropy"] and set(report.applied) <= set(names)


def test_unknown_pass_options_are_refused():
    with pytest.raises(TypeError, match="unknown pass options \\['chunked_ce'\\]"):
        optimize(llm(), chunked_ce="always")
    with pytest.raises(ValueError, match="chunked_cross_entropy must be one of auto, always, never"):
        optimize(llm(), chunked_cross_entropy="sometimes")


def test_each_pass_is_handed_its_own_frozen_options_and_its_parts_options():
    values = registry.option_values({"padding_free_row_tokens": "longest", "chunked_cross_entropy": "always"})
    for spec in registry.model_passes():
        options = registry.setup_for(spec, values, check=True, facts=registry.TrainerFacts()).options
        assert type(options) is spec.options_class, spec.name
        with pytest.raises(FrozenInstanceError):
            setattr(options, spec.name, spec.off)
    padding = registry.setup_for(registry.get_pass("padding_free"), values, check=True, facts=registry.TrainerFacts())
    assert type(padding.options).__name__ == "PaddingFreeOptions" and not padding.parts
    assert padding.options.padding_free_row_tokens == "longest" and padding.options.padding_free_attention == "packed"
    # the chunked head is label sparsity's part: the registry states it and hands its options over, when on
    assert registry.get_pass("chunked_cross_entropy").part_of == "label_sparsity"
    sparsity = registry.get_pass("label_sparsity")
    handed = registry.setup_for(sparsity, values, check=True, facts=registry.TrainerFacts()).parts
    assert (
        list(handed) == ["chunked_cross_entropy"] and handed["chunked_cross_entropy"].chunked_cross_entropy == "always"
    )
    never = registry.option_values({"chunked_cross_entropy": "never"})
    assert registry.setup_for(sparsity, never, check=True, facts=registry.TrainerFacts()).parts == {}
    assert optimize(llm(), chunked_cross_entropy="never").chunked_cross_entropy is None


def test_label_sparsity_gets_its_chunked_head_when_built():
    # the chunked head is chosen while label sparsity is built (its self-check ran on a trial head in
    # mode "always", since removed) and nobody sets it afterwards; TRL's fused calls are decided there too
    model = llm()
    report = optimize(model, facts=registry.TrainerFacts(fused_call_weighting="equal"))
    chunked = report.chunked_cross_entropy
    assert report.label_sparsity.chunked_head is chunked and chunked.mode == "auto" and chunked.compose_fused_calls
    assert model.get_output_embeddings()._turbotrain_chunked_ce is chunked  # the trial head is gone
    assert not optimize(llm()).chunked_cross_entropy.compose_fused_calls
    report.undo()
    assert "_turbotrain_chunked_ce" not in vars(model.get_output_embeddings())
