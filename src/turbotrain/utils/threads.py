"""How many intra-op threads the main job gives torch: the cores it may run on, less those other work keeps busy.

`usable_cores` is `os.sched_getaffinity` (a container or `taskset` limit counts), `os.cpu_count()` where that
is missing. `busy_cores` samples /proc/stat over those cores for `seconds` while this process sleeps: the
cores' busy share then is other processes' work (Linux only; elsewhere the 1-minute load average). Torch's
thread pool waits for its slowest thread at every op, so a thread sharing a core with a CPU-bound process
stalls all of them (steps slowed 0.18 s -> 3-6 s beside one on 2 cores); one thread fewer per busy core
keeps the job steady instead. `OMP_NUM_THREADS` or `--threads`, when given, win.

`OtherWork` measures the same without sleeping, for a process that is working: the usable cores' busy
jiffies between two samples less this process's own CPU time (/proc/self/stat, all its threads), so a
trainer can choose at its start from the time since it was built, and look again during training at the cost
of two small file reads (keep_threads.py in the trainer's layer does that).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    usable: int
    busy: float
    reason: str

    def line(self) -> str:
        return f"threads: {self.threads} of {self.usable} usable cores ({self.reason})"


def usable_cores() -> set[int]:
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def read_cpu_times(path: str = "/proc/stat") -> dict[int, tuple[int, int]]:
    """core -> (busy, total) jiffies since boot (idle and iowait count as not busy)."""
    times: dict[int, tuple[int, int]] = {}
    with open(path) as stat:
        for line in stat:
            name, *fields = line.split()
            if not (name.startswith("cpu") and name[3:].isdigit()):
                continue
            values = [int(v) for v in fields[:8]]
            idle = values[3] + values[4]
            times[int(name[3:])] = (sum(values) - idle, sum(values))
    return times


def busy_cores(
    cores: set[int],
    seconds: float = 0.5,
    read: Callable[[], dict[int, tuple[int, int]]] = read_cpu_times,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Cores' worth of other processes' work on `cores` over `seconds` (this process sleeps meanwhile, so all the
    busy time is others': `OtherWork` over that window); the 1-minute load average where /proc is missing."""
    work = OtherWork(cores, read=read, own=lambda: 0)
    sleep(seconds)
    busy = work.sample()
    if busy is not None:
        return busy
    return min(float(len(cores)), os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0.0


def choose_threads(usable: int, busy: float, requested: int | None = None) -> ThreadChoice:
    """`requested` when given; else one thread per usable core, less one per core other work keeps busy
    (a core counts as busy above 50%), never fewer than one."""
    if requested is not None:
        return ThreadChoice(requested, usable, busy, "as requested")
    free = max(1, usable - int(busy + 0.5))
    reason = "idle" if free == usable else f"{busy:.1f} busy with other work"
    return ThreadChoice(free, usable, busy, reason)


def set_threads(requested: int | None = None) -> ThreadChoice:
    """Choose (above) and apply with `torch.set_num_threads`; `OMP_NUM_THREADS` in the environment wins."""
    import torch

    cores = usable_cores()
    if requested is None and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        choice = ThreadChoice(int(os.environ["OMP_NUM_THREADS"]), len(cores), 0.0, "OMP_NUM_THREADS")
    else:
        choice = choose_threads(len(cores), busy_cores(cores) if requested is None else 0.0, requested)
    torch.set_num_threads(choice.threads)
    return choice


def own_cpu_jiffies(path: str = "/proc/self/stat") -> int:
    """This process's user + system CPU time, all threads, and its waited-for children's, in clock ticks (the unit
    of /proc/stat): a bench segment run in a child process of its own is this process's work."""
    with open(path) as stat:
        fields = stat.read().rpartition(")")[2].split()
    return sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime (fields 14-17 of proc(5))


@dataclass(frozen=True)
class CpuSample:
    when: float  # time.monotonic()
    cores: dict[int, tuple[int, int]]  # read_cpu_times()
    own: int  # own_cpu_jiffies()


class OtherWork:
    """Cores' worth of other processes' work on the usable cores since the last `sample()`, this process's own
    work taken out. None where /proc is missing (not Linux) or the window held no tick."""

    def __init__(
        self,
        cores: set[int] | None = None,
        read: Callable[[], dict[int, tuple[int, int]]] = read_cpu_times,
        own: Callable[[], int] = own_cpu_jiffies,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.cores = usable_cores() if cores is None else cores
        self._read, self._own, self._clock = read, own, clock
        self.last = self._take()

    def _take(self) -> CpuSample | None:
        try:
            return CpuSample(self._clock(), self._read(), self._own())
        except (OSError, ValueError, IndexError):
            return None

    def seconds_since(self) -> float:
        return self._clock() - self.last.when if self.last is not None else 0.0

    def sample(self) -> float | None:
        """Other processes' busy cores since the last sample (which this one replaces)."""
        before, after = self.last, self._take()
        self.last = after
        if before is None or after is None:
            return None
        cores = self.cores & before.cores.keys() & after.cores.keys()
        busy = sum(after.cores[c][0] - before.cores[c][0] for c in cores)
        total = sum(after.cores[c][1] - before.cores[c][1] for c in cores)
        if total <= 0:
            return None
        per_core_ticks = total / len(cores)
        others = max(0, busy - (after.own - before.own))
        return min(float(len(cores)), others / per_core_ticks)


def user_set_threads() -> str | None:
    """The environment variable that sets the thread count, where one does (the user's setting stands)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(name, "").strip():
            return name
    return None


class ThreadKeeper:
    """A training run's thread count on a CPU, chosen as the main job chooses it (`choose_threads`) and looked at
    again every `recheck_seconds` of training: never above the count the run began with (torch's default, or what
    the user's code set), one fewer per core other processes keep busy, never below one; put back at the end.
    The user's own setting (`OMP_NUM_THREADS`, `MKL_NUM_THREADS`) stands: then nothing is changed.

    The first choice uses the time since the keeper was made (the trainer's own set-up taken out); where that
    window is shorter than `min_window_s` it waits the rest (at most that, once per `train()`)."""

    def __init__(
        self,
        get_threads: Callable[[], int],
        set_threads: Callable[[int], None],
        work: OtherWork | None = None,
        recheck_seconds: float = 5.0,
        min_window_s: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._get, self._set, self._sleep = get_threads, set_threads, sleep
        self.work = work if work is not None else OtherWork()
        self.recheck_seconds, self.min_window_s = recheck_seconds, min_window_s
        self.ceiling: int | None = None  # the count the run began with; None: the user's setting stands
        self.choice: ThreadChoice | None = None
        self.changes = 0  # how often a re-check changed the count during the run

    def begin(self) -> ThreadChoice:
        self.changes = 0
        current = self._get()
        setting = user_set_threads()
        if setting is not None:
            self.ceiling, self.choice = None, ThreadChoice(current, len(self.work.cores), 0.0, setting)
            return self.choice
        self.ceiling = current
        wait = self.min_window_s - self.work.seconds_since()
        if wait > 0:
            self._sleep(wait)
        self.choice = self._choose(self.work.sample())
        self._apply(self.choice.threads)
        return self.choice

    def step(self) -> ThreadChoice | None:
        """Look again when `recheck_seconds` have passed: the new choice where it changed the count, else None."""
        if self.ceiling is None or self.work.seconds_since() < self.recheck_seconds:
            return None
        choice = self._choose(self.work.sample())
        if self.choice is not None and choice.threads == self.choice.threads:
            return None
        self.choice, self.changes = choice, self.changes + 1
        self._apply(choice.threads)
        return choice

    def end(self) -> None:
        if self.ceiling is not None:
            self._apply(self.ceiling)

    def _choose(self, busy: float | None) -> ThreadChoice:
        usable = len(self.work.cores)
        if busy is None:  # no /proc: keep the count the run began with
            return ThreadChoice(self.ceiling, usable, 0.0, "load unknown")
        choice = choose_threads(usable, busy)
        if choice.threads <= self.ceiling:
            return choice
        return ThreadChoice(self.ceiling, usable, busy, f"{choice.reason}; the {self.ceiling} the run began with")

    def _apply(self, threads: int) -> None:
        if self._get() != threads:
            self._set(threads)
