"""turbotrain's options for a zero-edit run: flags before the script, TURBOTRAIN_OPTIONS, checked once."""

from __future__ import annotations

import pytest

from turbotrain.launch.run_options import OptionError, option_names, run_options, split_command_line


def test_flags_before_the_script_are_turbotrain_s_and_the_rest_is_the_script_s():
    options, command = split_command_line(
        ["--backend", "eager", "--padding-free", "False", "--max_tokens_per_batch=512", "train.py", "--backend", "x"]
    )
    assert options == {"backend": "eager", "padding_free": False, "max_tokens_per_batch": 512}
    assert command == ["train.py", "--backend", "x"]


def test_a_double_dash_ends_turbotrain_s_flags():
    options, command = split_command_line(["--label_sparsity", "no", "--", "--weird-name.py", "a"])
    assert options == {"label_sparsity": False} and command == ["--weird-name.py", "a"]


def test_dict_and_optional_values_parse():
    options, _ = split_command_line(["--backend_options", '{"scope": "blocks"}', "--max_tokens_per_batch", "None", "s"])
    assert options == {"backend_options": {"scope": "blocks"}, "max_tokens_per_batch": None}


def test_a_misspelt_flag_is_an_error_listing_the_valid_options():
    with pytest.raises(OptionError) as error:
        split_command_line(["--bakend", "eager", "train.py"])
    message = str(error.value)
    assert "'bakend'" in message and "did you mean 'backend'" in message
    assert all(name in message for name in option_names())


def test_a_misspelt_environment_option_is_an_error_too():
    with pytest.raises(OptionError, match="unknown turbotrain option 'padding_fre'.*valid options: backend"):
        run_options(["train.py"], environ={"TURBOTRAIN_OPTIONS": '{"padding_fre": false}'})


def test_flags_win_over_the_environment_variable():
    environ = {"TURBOTRAIN_OPTIONS": '{"backend": "inductor", "embedding_grad": false}'}
    options, command = run_options(["--backend", "eager", "train.py"], environ=environ)
    assert options == {"backend": "eager", "embedding_grad": False} and command == ["train.py"]


@pytest.mark.parametrize(
    "argv,environ,match",
    [
        (["--backend", "tpu", "s.py"], {}, "unknown backend 'tpu'"),
        (["--padding_free", "maybe", "s.py"], {}, "takes True or False"),
        (["--max_tokens_per_batch", "lots", "s.py"], {}, "whole number"),
        (["s.py"], {"TURBOTRAIN_OPTIONS": "backend=eager"}, "not JSON"),
        (["s.py"], {"TURBOTRAIN_OPTIONS": '{"label_sparsity": "yes"}'}, "label_sparsity must be True or False"),
        (["--backend_options", '{"nope": 1}', "--backend", "inductor", "s.py"], {}, "nope"),
        (["--backend"], {}, "needs a value"),
    ],
)
def test_bad_values_are_refused_before_the_script_runs(argv, environ, match):
    with pytest.raises(OptionError, match=match):
        run_options(argv, environ=environ)
