"""bench/isolated.py: `--isolate` runs each peer's segment in a process of its own, same numbers, loud failures."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.bench.tiny import tiny_workload
from turbotrain.bench.initial_model import ModelFile
from turbotrain.bench.runner import run_bench, run_segment_isolated


class DiesWhenUnpickled:
    """Data whose unpickling kills the process that receives it, as the kernel's out-of-memory killer would."""

    def __reduce__(self):
        return _kill_self, ()


def _kill_self():
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.slow
def test_isolated_segments_train_as_the_shared_process_does_and_say_so(tmp_path):
    result = run_bench(tiny_workload(isolate=True), out_dir=tmp_path)
    stock, turbo = result["peers"]["stock"], result["peers"]["turbo"]
    assert turbo["max_rel_loss_diff"] < 1e-4 and stock["final_loss"] > 0  # same weights and batches in each child
    assert "label_sparsity" in turbo["passes"] and stock["passes"] == []  # the peers' own reports came back
    assert all(row["peak_memory_mb"] > row["memory_at_start_mb"] > 0 for row in (stock, turbo))  # each child's own
    assert " --isolate " in result["command"]
    assert json.loads((tmp_path / "bench.json").read_text())["workload"]["isolate"] is True
    assert "each segment in a process of its own" in (tmp_path / "bench.md").read_text()


def test_a_failing_segment_is_an_error_with_the_childs_traceback(tmp_path):
    missing = ModelFile(tmp_path / "no-such-model.pt")
    with pytest.raises(RuntimeError, match=r"'turbo' peer's segment \(round 2\)[\s\S]*no-such-model"):
        run_segment_isolated(tiny_workload(), "turbo", missing, None, "cpu", round_index=1)


def test_a_killed_segment_is_an_error_naming_its_exit_code(tmp_path):
    with pytest.raises(RuntimeError, match=r"'stock' peer's segment \(round 1\).*exit code -9 \(killed"):
        run_segment_isolated(tiny_workload(), "stock", ModelFile(tmp_path / "m.pt"), DiesWhenUnpickled(), "cpu", 0)
