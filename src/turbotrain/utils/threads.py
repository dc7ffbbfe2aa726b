"""How many intra-op threads the main job gives torch: the cores it may run on, less those other work keeps busy.

`usable_cores` is `os.sched_getaffinity` (a container or `taskset` limit counts), `os.cpu_count()` where that
is missing. `busy_cores` samples /proc/stat over those cores for `seconds` while this process sleeps: the
cores' busy share then is other processes' work (Linux only; elsewhere the 1-minute load average). Torch's
thread pool waits for its slowest thread at every op, so a thread sharing a core with a CPU-bound process
stalls all of them (steps slowed 0.18 s -> 3-6 s beside one on 2 cores); one thread fewer per busy core
keeps the job steady instead. `OMP_NUM_THREADS` or `--threads`, when given, win.
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
    """Cores' worth of other processes' work on `cores` over `seconds` (this process sleeps meanwhile)."""
    try:
        before = read()
        sleep(seconds)
        after = read()
    except OSError:
        return min(float(len(cores)), os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0.0
    busy = 0.0
    for core in cores & before.keys() & after.keys():
        busy_delta = after[core][0] - before[core][0]
        total_delta = after[core][1] - before[core][1]
        busy += busy_delta / total_delta if total_delta > 0 else 0.0
    return busy


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
