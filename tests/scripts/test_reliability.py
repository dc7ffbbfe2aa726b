"""The reliability script's judges: what a refused, crashed, accepted or still-running command counts as."""

from __future__ import annotations

import subprocess

import pytest
from scripts.reliability import markdown
from scripts.reliability_common import CLEAR, RIGHT, TRACEBACK, WRONG, Probe, judge_refusal, raises_clearly


def done(code: int, err: str = "", out: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(["x"], code, out, err)


@pytest.mark.parametrize(
    "result,outcome",
    [
        (done(2, "turbotrain pretrain: error: --steps must be positive"), CLEAR),
        (done(1, "Traceback (most recent call last):\n  ...\nZeroDivisionError: integer modulo by zero"), TRACEBACK),
        (done(0, out="trained"), WRONG),
        (done(-9, "(still running after 90 s)"), WRONG),
    ],
)
def test_commands_are_judged_by_exit_code_and_stderr(result, outcome):
    assert judge_refusal(result, "error")[0] == outcome


def test_calls_are_judged_by_the_exception_and_its_message():
    def refuse():
        raise ValueError("max_tokens_per_batch must be an int")

    assert raises_clearly(refuse, "max_tokens")[0] == CLEAR
    assert raises_clearly(refuse, "something else")[0] == TRACEBACK
    assert raises_clearly(lambda: 1 / 0, ".")[0] == TRACEBACK
    assert raises_clearly(lambda: None, ".")[0] == WRONG


def test_the_table_counts_outcomes_per_kind():
    rows = [
        (Probe("args", "a", CLEAR, None), CLEAR, "n", 0.1),
        (Probe("args", "b", CLEAR, None), WRONG, "n", 0.1),
        (Probe("kill", "c", RIGHT, None), RIGHT, "n", 1.0),
    ]
    table = markdown(rows)
    assert "| args | 2 | 1 | 0 | 0 | 1 | 0 | 0 | 1/2 |" in table
    assert "| **all** | 3 | 1 | 1 | 0 | 1 | 0 | 0 | 2/3 |" in table
