"""`random_state_kept(device)`: a block whose random draws leave the run's generators as they were.

Work turbotrain does beside a run (reading a few dataset examples to size a cache key, timing a kernel) must
not move the generators the run draws from: a dataset transform that augments draws from `random`, numpy or
torch, and a moved generator changes every later dropout mask, DataLoader worker seed and sampler shuffle, so a
run would train on other random numbers than stock's. Kept: torch's CPU generator, the generator of `device` where
it is an accelerator's, Python's `random`, numpy's global generator (where numpy is installed).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def random_state_kept(device: torch.device | None = None) -> Iterator[None]:
    python = random.getstate()
    numpy = _numpy_random()
    numpy_state = numpy.get_state() if numpy is not None else None
    accelerator = device is not None and device.type not in ("cpu", "meta")
    devices, device_type = ([device], device.type) if accelerator else ([], "cuda")  # no device state forked
    with torch.random.fork_rng(devices=devices, device_type=device_type):
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
