"""`random_state_kept()`: a block whose random draws leave the run's generators as they were.

Work turbotrain does beside a run (reading a few dataset examples to size a cache key, timing a kernel) must
not move the generators the run draws from: a dataset transform that augments draws from `random`, numpy or
torch, and a moved generator changes every later dropout mask, DataLoader worker seed and sampler shuffle, so a
run would train on other random numbers than stock's. Kept: torch's CPU generator, Python's `random`, numpy's
global generator (where numpy is installed). Accelerators' generators: `passes.device_timing.own_random_numbers`.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def random_state_kept() -> Iterator[None]:
    python = random.getstate()
    numpy = _numpy_random()
    numpy_state = numpy.get_state() if numpy is not None else None
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(python)
            if numpy is not None:
                numpy.set_state(numpy_state)


def _numpy_random():
    try:
        import numpy.random
    except ImportError:
        return None
    return numpy.random
