"""TurboTrainingArguments: typed options, defaults, clear errors."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest
from transformers import HfArgumentParser, TrainingArguments

from turbotrain import TurboOptions, TurboTrainingArguments
from turbotrain.training import token_budget


def make_args(tmp_path, **kwargs):
    return TurboTrainingArguments(output_dir=str(tmp_path), report_to="none", **kwargs)


def test_defaults(tmp_path):
    args = make_args(tmp_path)
    assert (args.backend, args.label_sparsity, args.fused_optimizer) == ("auto", True, True)


def test_unknown_backend_lists_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown backend 'tpu'; valid backends: auto, eager, inductor"):
        make_args(tmp_path, backend="tpu")


def test_non_bool_option_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="label_sparsity must be True or False"):
        make_args(tmp_path, label_sparsity="yes")


def test_ort_fused_alias_is_the_fused_adamw(tmp_path):
    assert make_args(tmp_path, optim="adamw_ort_fused").optim == "adamw_torch_fused"


def test_plain_training_arguments_get_default_options(tmp_path):
    options = TurboOptions.from_args(TrainingArguments(output_dir=str(tmp_path), report_to="none"))
    assert options == TurboOptions()


def test_arguments_round_trip_through_dict(tmp_path):
    args = make_args(tmp_path, backend="inductor", label_sparsity=False)
    assert args.to_dict()["backend"] == "inductor" and args.to_dict()["label_sparsity"] is False


def test_backend_options_on_a_script_s_command_line_are_json(tmp_path):
    # the field was `dict | None`: HfArgumentParser called dict('{"scope": "blocks"}') and the script exited
    parser = HfArgumentParser(TurboTrainingArguments)
    command_line = ["--output_dir", str(tmp_path), "--backend", "inductor", "--backend_options", '{"scope": "blocks"}']
    (args,) = parser.parse_args_into_dataclasses(command_line)
    assert args.backend_options == {"scope": "blocks"}
    assert TurboOptions.from_args(args).backend_options == {"scope": "blocks"}


@pytest.mark.parametrize("text", ["scope=blocks", '["blocks"]', '{"scope": "blocks"'])
def test_backend_options_text_that_is_not_a_json_object_is_refused(tmp_path, text):
    with pytest.raises(ValueError, match="backend_options takes a JSON object"):
        make_args(tmp_path, backend="inductor", backend_options=text)


def test_backend_options_json_null_is_none(tmp_path):
    assert make_args(tmp_path, backend="inductor", backend_options="null").backend_options is None


def test_backend_options_json_text_is_checked_against_the_backend(tmp_path):
    with pytest.raises(ValueError, match="scop"):
        make_args(tmp_path, backend="inductor", backend_options='{"scop": "blocks"}')


@pytest.mark.parametrize("value", ["100", 2.5, True, 0, -3])
def test_max_tokens_per_batch_must_be_a_positive_int(tmp_path, value):
    with pytest.raises(ValueError, match="max_tokens_per_batch must be a positive whole number of tokens"):
        make_args(tmp_path, max_tokens_per_batch=value)


@pytest.mark.skipif(
    token_budget.BatchRebalanceSampler is object, reason="Transformers < 5.17: refused with the version"
)
def test_max_tokens_per_batch_accepts_an_int(tmp_path):
    assert make_args(tmp_path, max_tokens_per_batch=512).max_tokens_per_batch == 512


@dataclass
class ScriptArguments(TrainingArguments):
    """A user's arguments class, as a script defines one (TRL's SFTConfig is one too)."""

    extra_flag: int = 3


def test_turbo_arguments_of_any_class_survive_a_checkpoint_save_and_a_fresh_process_load(tmp_path):
    # Trainer writes training_args.bin with torch.save at every checkpoint; TRL's sft.py with TurboSFTConfig
    # crashed there: the made class was pickled by a name no module holds.
    from tests.tiny_models import make
    from tests.trainer_helpers import COMMON, dataset
    from turbotrain import turbo_arguments
    from turbotrain.trainer import TurboTrainer

    args = turbo_arguments(ScriptArguments)(
        output_dir=str(tmp_path),
        **{**COMMON, "max_steps": 2, "save_strategy": "steps", "save_steps": 2},
        label_sparsity=False,
        extra_flag=7,
    )
    TurboTrainer(model=make("roberta"), args=args, train_dataset=dataset()).train()
    saved = tmp_path / "checkpoint-2" / "training_args.bin"
    code = (
        f"import torch; a = torch.load({str(saved)!r}, weights_only=False); "
        "print(type(a).__name__, a.extra_flag, a.label_sparsity, a.max_steps)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["TurboScriptArguments", "7", "False", "2"]


def test_the_backend_options_help_names_every_backends_every_option():
    import re
    from dataclasses import fields

    from turbotrain.backends.backend_registry import backend_class, backend_names

    text = next(f for f in fields(TurboOptions) if f.name == "backend_options").metadata["help"]
    for name in backend_names():
        options = {option.name for option in fields(backend_class(name).options_class)}
        named = re.search(rf"\b{name} \(([^)]*)\)", text)
        assert not options or (named and options <= set(re.findall(r"\w+", named.group(1)))), name


def test_every_registered_pass_s_options_are_written_fields_of_turbo_options():
    """Written, not generated: each pass's options class is one of TurboOptions' bases, every one of its fields a
    real dataclass field of TurboOptions with the same type, default and help (what IDEs and type checkers read)."""
    import typing
    from dataclasses import fields

    from turbotrain.args import PARTS
    from turbotrain.passes import registry

    declared = {f.name: f for f in fields(TurboOptions)}
    hints = typing.get_type_hints(TurboOptions)
    for spec in registry.passes():
        assert spec.options_class in PARTS and issubclass(TurboOptions, spec.options_class), spec.name
        own = typing.get_type_hints(spec.options_class)
        for field in fields(spec.options_class):
            assert field.name in declared, field.name
            assert hints[field.name] is own[field.name] and hints[field.name] in (bool, str), field.name
            assert declared[field.name].default == field.default and declared[field.name].metadata["help"]
    assert hints["max_tokens_per_batch"] == int | None and hints["bf16_emulation"] is str
    assert list(declared)[:4] == ["backend", "backend_options", "max_tokens_per_batch", "bf16_emulation"]
    assert set(TurboOptions.__bases__) == set(PARTS)
