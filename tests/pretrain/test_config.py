"""Bad `turbotrain pretrain` arguments are refused up front, with one line naming the flag."""

from __future__ import annotations

import pytest

from turbotrain.cli import main


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--steps", "0"], "--steps"),
        (["--steps", "-1"], "--steps"),
        (["--seq-len", "0"], "--seq-len"),
        (["--seq-len", "1"], "--seq-len"),
        (["--seq-len", "8"], "--seq-len"),
        (["--heads", "0"], "--heads"),
        (["--hidden-size", "0"], "--hidden-size"),
        (["--layers", "0"], "--layers"),
        (["--hidden-size", "100", "--heads", "3"], "multiple of --heads"),
        (["--lr", "inf"], "--lr"),
        (["--lr", "nan"], "--lr"),
        (["--lr", "-0.001"], "--lr"),
        (["--lr", "0"], "--lr"),
        (["--vocab-size", "10"], "--vocab-size"),
        (["--warmup-steps", "-1"], "--warmup-steps"),
        (["--batch-size", "0"], "--batch-size"),
    ],
)
def test_bad_argument_is_refused_with_one_line(tmp_path, capsys, flags, named):
    out = tmp_path / "out"
    assert main(["pretrain", "--output-dir", str(out), "--quiet", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("turbotrain pretrain: error: ") and named in err and "\n" not in err
    assert not out.exists()  # refused before anything was created


def test_warm_up_defaults_to_five_percent_of_the_steps():
    from turbotrain.pretrain import PretrainConfig

    assert PretrainConfig(max_steps=8000).warmup == 400 and PretrainConfig(max_steps=100).warmup == 5
    assert PretrainConfig(max_steps=100, warmup_steps=0).warmup == 0
    with pytest.raises(ValueError, match="not planned yet"):
        assert PretrainConfig().warmup  # a budgeted config has no steps until run_pretrain plans them
