"""Shared fixtures and markers: every test starts with turbotrain's once-per-process warnings unsaid, so a
test that expects one does not depend on which tests ran before it; and a test marked
`requires_<extra>` (tests/requires.py) is skipped, naming the install line, where its dependency is missing.

The README's test command runs the suite on pytest-xdist workers (`-n 2`): each worker then takes its share of
the cores for torch's intra-op threads (and its subprocesses, through OMP_NUM_THREADS), so two workers never
oversubscribe two cores, and keeps turbotrain's cache (`TURBOTRAIN_CACHE`) in a folder of its own, so no test
reads what another worker's test measured or what a user's runs left in `~/.cache/turbotrain`. The modules that
take longest (`SLOWEST_FIRST`) are collected first: xdist's `--dist loadfile` hands out whole modules in the
order collected, and one of them started last would leave the other worker idle until it ends."""

from __future__ import annotations

import os
import tempfile

import pytest

from tests import requires
from turbotrain.utils import warnings as turbotrain_warnings


def share_the_cores() -> None:
    """Under an xdist worker: usable cores / workers threads for torch here and for the subprocesses tests start."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if "PYTEST_XDIST_WORKER" not in os.environ or workers < 2:
        return
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = max(1, cores // workers)
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)


def pytest_configure(config):
    share_the_cores()
    if "TURBOTRAIN_CACHE" not in os.environ:
        os.environ["TURBOTRAIN_CACHE"] = tempfile.mkdtemp(prefix="turbotrain-test-cache-")
    for name, (_, install) in requires.REQUIREMENTS.items():
        config.addinivalue_line("markers", f"{requires.PREFIX}{name}: skipped without {install}")


# the modules of the README run's 20 slowest tests (its --durations), slowest first (tests/test_conftest.py
# checks each exists)
SLOWEST_FIRST = (
    "tests/backends/xla/test_pod.py",
    "tests/test_compile_unet.py",
    "tests/backends/test_inductor.py",
    "tests/backends/test_onnxruntime.py",
    "tests/scripts/test_gpu_check.py",
    "tests/backends/test_ort_binding.py",
    "tests/backends/xla/test_training.py",
    "tests/backends/test_onnxruntime_seq2seq.py",
    "tests/launch/test_launchers.py",
    "tests/ondevice/test_faults.py",
    "tests/scale/test_data_parallel.py",
    "tests/scale/test_sharded.py",
)


def slowest_first(items: list) -> None:
    """`items` reordered in place: SLOWEST_FIRST's modules first, in its order; the rest as collected (a stable
    sort, so a module's tests keep their order)."""
    rank = {path: index for index, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_collection_modifyitems(config, items):
    slowest_first(items)
    skip_missing_requirements(items)


def skip_missing_requirements(items: list) -> None:
    """Each test marked `requires_<extra>` whose dependency is missing gets a skip naming the install line."""
    for item in items:
        reasons = [requires.missing(m.name) for m in item.iter_markers() if m.name.startswith(requires.PREFIX)]
        missing = [reason for reason in reasons if reason is not None]
        if missing:
            item.add_marker(pytest.mark.skip(reason="; ".join(missing)))


@pytest.fixture(autouse=True)
def fresh_warnings():
    turbotrain_warnings._already_warned.clear()
    yield


@pytest.fixture(autouse=True)
def no_onednn_cap(monkeypatch):
    """Tests read the CPU's own bf16 units: a shell's oneDNN ISA cap (utils/cpu.py) would hide them from them."""
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(name, raising=False)
