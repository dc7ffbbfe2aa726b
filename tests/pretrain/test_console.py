"""What a user sees: the console of real `turbotrain pretrain` runs (tiny model), stdout and stderr as one stream.

Each line once and on a line of its own (never after the bar on its line), no dict of Trainer's, the bar at
100% (or saying the budget stopped it), no missing-keys warning for the tied weights on `--resume`, and the
whole job's time after a resume at least the first part's."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

TINY = "--hidden-size 32 --layers 1 --heads 2 --seq-len 32 --batch-size 8 --vocab-size 1000 --no-plot".split()
BAR = re.compile(r"\d+%\|")
WHOLE_JOB = re.compile(r"(\d[\d,]*) steps.* in (\d+) min (\d+) s\b.*\(the whole job so far")


def pretrain(out, *flags: str) -> str:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "100"}  # one stream, in the order written
    done = subprocess.run(
        [sys.executable, "-m", "turbotrain", "pretrain", "--output-dir", str(out), *TINY, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    return done.stdout


def segments(console: str) -> list[str]:
    """What the terminal shows on one line at a time: the bar redraws with carriage returns."""
    return [s for s in re.split(r"[\r\n]", console) if s.strip()]


def assert_clean(console: str) -> None:
    shown = segments(console)
    assert not re.search(r"\{'\w+': ", console)  # no dict of Trainer's (the sizing probe's train_runtime, loss logs)
    backend = [s for s in shown if "turbotrain: backend" in s]
    assert len(backend) == 1 and not BAR.search(backend[0]), backend  # once, on a line of its own
    assert not any(BAR.search(s) and re.search(r"\]\S", s) for s in shown)  # nothing written after a bar
    last_bar = [s for s in shown if BAR.search(s)][-1]
    assert "100%" in last_bar or "budget reached" in last_bar, last_bar
    assert "missing keys" not in console


def job_seconds(console: str) -> int:
    minutes, seconds = WHOLE_JOB.search(console).groups()[1:]
    return 60 * int(minutes) + int(seconds)


@pytest.mark.slow
def test_a_run_and_its_resume_print_each_line_once_outside_the_bar_and_the_whole_job_time(tmp_path):
    flags = ["--backend", "eager", "--save-steps", "10", "--eval-steps", "10", "--logging-steps", "10"]
    first = pretrain(tmp_path / "out", "--steps", "20", *flags)
    assert_clean(first)
    assert "step 20: loss" in first  # the loss logs, one line each
    resumed = pretrain(tmp_path / "out", "--steps", "30", "--resume", *flags)
    assert_clean(resumed)  # no "missing keys ['lm_head.decoder.weight', 'lm_head.decoder.bias']"
    assert "resuming from" in resumed and "up to" in resumed
    assert job_seconds(resumed) >= job_seconds(first)


@pytest.mark.slow
def test_a_budgeted_run_prints_no_probe_output_and_its_plan_once(tmp_path):
    console = pretrain(tmp_path / "out", "--minutes", "1")
    assert_clean(console)
    assert len([s for s in segments(console) if "steps/s fit" in s]) == 1
