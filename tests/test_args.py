"""TurboTrainingArguments: typed options, defaults, clear errors."""

from __future__ import annotations

import pytest
from transformers import TrainingArguments

from turbotrain import TurboOptions, TurboTrainingArguments
from turbotrain.data import token_budget


def make_args(tmp_path, **kwargs):
    return TurboTrainingArguments(output_dir=str(tmp_path), report_to="none", **kwargs)


def test_defaults(tmp_path):
    args = make_args(tmp_path)
    assert (args.backend, args.label_sparsity, args.fused_optimizer) == ("auto", True, True)
    assert args.resolved_backend == "auto"  # a backend of its own: measures eager against inductor


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


@pytest.mark.parametrize("value", ["100", 2.5, True, 0, -3])
def test_max_tokens_per_batch_must_be_a_positive_int(tmp_path, value):
    with pytest.raises(ValueError, match="max_tokens_per_batch must be a positive whole number of tokens"):
        make_args(tmp_path, max_tokens_per_batch=value)


@pytest.mark.skipif(
    token_budget.BatchRebalanceSampler is object, reason="Transformers < 5.17: refused with the version"
)
def test_max_tokens_per_batch_accepts_an_int(tmp_path):
    assert make_args(tmp_path, max_tokens_per_batch=512).max_tokens_per_batch == 512
