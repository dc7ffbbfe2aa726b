"""Thread choice (threads.py): the usable cores, one fewer per core other work keeps busy; no timing."""

from __future__ import annotations

import os

import pytest

from turbotrain.utils.threads import busy_cores, choose_threads, read_cpu_times, usable_cores


@pytest.mark.parametrize(
    "usable, busy, threads",
    [(2, 0.0, 2), (2, 0.3, 2), (2, 1.0, 1), (2, 1.9, 1), (2, 2.0, 1), (8, 3.2, 5), (1, 1.0, 1)],
)
def test_one_thread_fewer_per_busy_core_never_below_one(usable, busy, threads):
    choice = choose_threads(usable, busy)
    assert choice.threads == threads and choice.usable == usable
    assert ("idle" in choice.line()) == (threads == usable)


def test_requested_threads_win():
    assert choose_threads(2, 2.0, requested=2).threads == 2


def test_busy_cores_counts_only_the_usable_cores_busy_share_over_the_sample():
    samples = iter(
        [
            {0: (100, 1000), 1: (100, 1000), 2: (0, 1000)},
            {0: (200, 1100), 1: (150, 1100), 2: (100, 1100)},  # core 0: 100% busy, core 1: 50%, core 2 unusable
        ]
    )
    slept = []
    assert busy_cores({0, 1}, 0.25, read=lambda: next(samples), sleep=slept.append) == pytest.approx(1.5)
    assert slept == [0.25]


def test_proc_stat_is_read_per_core(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  9 9 9 9 9 0 0 0\ncpu0 10 0 5 80 5 0 0 0 0 0\ncpu1 1 1 1 1 0 0 0 0\nintr 5\n")
    assert read_cpu_times(str(stat)) == {0: (15, 100), 1: (3, 4)}


def test_usable_cores_follow_the_affinity_mask():
    if hasattr(os, "sched_getaffinity"):
        assert usable_cores() == set(os.sched_getaffinity(0))
