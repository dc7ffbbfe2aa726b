"""Thread choice (threads.py): the usable cores, one fewer per core other work keeps busy; no timing."""

from __future__ import annotations

import os

import pytest

from turbotrain.utils.threads import (
    OtherWork,
    ThreadKeeper,
    busy_cores,
    choose_threads,
    read_cpu_times,
    usable_cores,
)


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


class FakeLoad:
    """/proc/stat of two cores and this process's CPU time, advanced by hand: `others` cores' worth of other work
    and `own` ticks of this process's per 100 ticks of wall time."""

    def __init__(self):
        self.busy, self.total, self.own_ticks, self.now = 0, 0, 0, 0.0

    def advance(self, seconds: float, others: float, own: float = 0.0) -> None:
        ticks = int(seconds * 100)
        self.busy += int(ticks * (others + own))
        self.total += 2 * ticks
        self.own_ticks += int(ticks * own)
        self.now += seconds

    def work(self) -> OtherWork:
        per_core = lambda: {0: (self.busy // 2, self.total // 2), 1: (self.busy - self.busy // 2, self.total // 2)}  # noqa: E731
        return OtherWork({0, 1}, read=per_core, own=lambda: self.own_ticks, clock=lambda: self.now)


def test_other_work_takes_this_process_out():
    load = FakeLoad()
    work = load.work()
    load.advance(1.0, others=1.0, own=1.0)  # this process keeps one core busy, another process the other
    assert work.sample() == pytest.approx(1.0)
    load.advance(1.0, others=0.0, own=2.0)  # this process alone, on both cores
    assert work.sample() == pytest.approx(0.0)


def test_other_work_is_unknown_without_proc():
    def missing():
        raise OSError("no /proc")

    assert OtherWork({0, 1}, read=missing).sample() is None


def keeper(load: FakeLoad, start: int = 2):
    threads = [start]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        load.advance(seconds, others=load_now[0])

    load_now = [0.0]
    made = ThreadKeeper(lambda: threads[0], lambda n: threads.__setitem__(0, n), load.work(), sleep=sleep)
    return made, threads, load_now, slept


def test_keeper_takes_one_thread_per_busy_core_and_puts_it_back(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    load = FakeLoad()
    made, threads, load_now, slept = keeper(load)
    load_now[0] = 2.0  # two CPU-bound processes beside the run
    choice = made.begin()
    assert slept and threads == [1] and choice.threads == 1 and "busy with other work" in choice.line()
    load.advance(2.0, others=2.0, own=1.0)
    assert made.step() is None  # before recheck_seconds: not looked at
    load.advance(8.0, others=0.0, own=2.0)  # the other processes ended (0.4 busy cores over the 10 s)
    assert made.step().threads == 2 and threads == [2] and made.changes == 1
    load.advance(6.0, others=2.0, own=1.0)
    assert made.step().threads == 1 and threads == [1]
    made.end()
    assert threads == [2]


def test_keeper_never_goes_above_the_count_the_run_began_with(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    load = FakeLoad()
    made, threads, _, _ = keeper(load, start=1)
    assert made.begin().threads == 1 and "the 1 the run began with" in made.choice.line()
    load.advance(6.0, others=0.0, own=1.0)
    assert made.step() is None and threads == [1]


def test_the_users_setting_stands(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    load = FakeLoad()
    made, threads, load_now, slept = keeper(load)
    load_now[0] = 2.0
    assert made.begin().line() == "threads: 2 of 2 usable cores (OMP_NUM_THREADS)"
    load.advance(6.0, others=2.0)
    assert made.step() is None and threads == [2] and not slept
    made.end()
    assert threads == [2]
