"""Bad `turbotrain bench`, `bench-ondevice` and `profile-ort` flags are refused before any model is built, in one
line naming the flag (bench/workload.py `check_bounds`), never a traceback from deep in a run."""

from __future__ import annotations

import pytest

from turbotrain.bench.workload import check_bounds
from turbotrain.bench.workloads import make_workload
from turbotrain.cli import main


@pytest.mark.parametrize(
    "command, flags, named",
    [
        ("bench", ["--rounds", "0"], "--rounds must be a positive whole number, got 0"),
        ("bench", ["--steps", "-2"], "--steps must be a positive whole number, got -2"),
        ("bench", ["--warmup", "-1"], "--warmup must be a whole number >= 0, got -1"),
        ("bench", ["--batch-size", "0"], "--batch-size must be a positive whole number"),
        ("bench", ["--task", "sft", "--seq-len", "0"], "--seq-len must be a positive whole number, got 0"),
        ("bench", ["--task", "sft", "--layers", "0"], "--layers must be a positive whole number"),
        ("bench", ["--task", "sft", "--dropout", "1"], "--dropout must be in [0, 1), got 1.0"),
        ("bench", ["--task", "mlm", "--dropout", "-0.1"], "--dropout must be in [0, 1)"),
        (
            "bench",
            ["--task", "dpo", "--prompt-tokens", "0", "10"],
            "--prompt-tokens must be a positive whole number each",
        ),
        ("bench", ["--task", "unet", "--channels", "32", "0"], "--channels must be a positive whole number each"),
        ("bench", ["--task", "sft", "--hidden-size", "100", "--heads", "3"], "--hidden-size (100) must be a multiple"),
        ("bench", ["--task", "seq2seq", "--examples", "0"], "--examples must be a positive whole number"),
        ("bench-ondevice", ["--steps", "0"], "--steps must be a positive whole number, got 0"),
        ("bench-ondevice", ["--rounds", "-1"], "--rounds must be a positive whole number"),
        ("profile-ort", ["--steps", "-3"], "--steps must be a positive whole number, got -3"),
        ("profile-ort", ["--seq-len", "0"], "--seq-len must be a positive whole number"),
        ("profile-ort", ["--heads", "7"], "--hidden-size (256) must be a multiple of --heads (7)"),
    ],
)
def test_a_bad_count_is_one_line_naming_its_flag_and_nothing_is_written(tmp_path, capsys, command, flags, named):
    out = tmp_path / "out"
    assert main([command, "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"turbotrain {command}: error: {err.split('error: ', 1)[1]}" and "\n" not in err
    assert named in err
    assert not out.exists()  # refused before the run folder was claimed


@pytest.mark.parametrize(
    "task, fields",
    [
        ("mlm", {"warmup": 0}),
        ("sft", {"seed": -5, "hidden_size": None}),  # any seed; None is the shape's own size
        ("unet", {"channels": (16, 32)}),
        ("mlm", {"dropout": 0.0}),
    ],
)
def test_the_least_values_and_the_tasks_defaults_pass(task, fields):
    workload = make_workload(task, **fields)
    check_bounds(workload)  # again, explicitly: nothing raised
    for name, value in fields.items():
        assert getattr(workload, name) == value
