"""SIGKILL a training run at a random step, and in the middle of a checkpoint write (then again in the same
write of the run resumed from it); resume with `resume_from_checkpoint=True`; the losses after each resume are
the uninterrupted run's (same data order, dropout RNG, optimizer and scheduler state)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.scale.resume_worker import SAVE_EVERY, STEPS
from turbotrain.training import checkpoints

ROOT = Path(__file__).resolve().parents[2]


def worker(out_dir: Path, losses: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "tests.scale.resume_worker", str(out_dir), str(losses), *extra]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def read_losses(path: Path) -> dict[int, float]:
    if not path.exists():
        return {}
    return {row["step"]: row["loss"] for row in map(json.loads, path.read_text().splitlines())}


def wait_for(condition, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"worker ended early: {process.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("timed out")
        time.sleep(0.05)


def finish(process: subprocess.Popen) -> None:
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[int, float]:
    tmp = tmp_path_factory.mktemp("full")
    finish(worker(tmp / "out", tmp / "losses.jsonl"))
    losses = read_losses(tmp / "losses.jsonl")
    assert sorted(losses) == list(range(1, STEPS + 1))
    return losses


def assert_resumed_like_uninterrupted(resumed: dict[int, float], full: dict[int, float]) -> None:
    assert max(resumed) == STEPS
    for step, loss in resumed.items():
        assert loss == pytest.approx(full[step], rel=1e-6), (step, loss, full[step])


@pytest.mark.slow
def test_sigkill_at_a_random_step_then_resume(tmp_path, uninterrupted):
    kill_after = random.Random(os.getpid()).randint(3, STEPS - 2)
    losses = tmp_path / "killed.jsonl"
    process = worker(tmp_path / "out", losses, "pace-after-step", str(kill_after))
    wait_for(lambda: max(read_losses(losses), default=0) >= kill_after, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert max(read_losses(losses)) < STEPS, "the kill must land while the run still trains"
    saved = newest_good_checkpoint_step(tmp_path / "out")  # the kill may land a step or two after kill_after
    assert saved is not None and saved >= kill_after - SAVE_EVERY, (saved, kill_after)
    resumed_log = tmp_path / "resumed.jsonl"
    finish(worker(tmp_path / "out", resumed_log, "resume"))
    resumed = read_losses(resumed_log)
    assert min(resumed) == saved + 1, "resume must start right after the newest checkpoint committed before the kill"
    assert_resumed_like_uninterrupted(resumed, uninterrupted)


def newest_good_checkpoint_step(output_dir: Path) -> int | None:
    """The step of the newest committed, undamaged checkpoint-N (read only: nothing is set aside)."""
    steps = sorted((int(p.name.split("-")[1]) for p in output_dir.glob("checkpoint-*") if p.is_dir()), reverse=True)
    return next((step for step in steps if checkpoints.problem(output_dir / f"checkpoint-{step}") is None), None)


def kill_mid_save(out: Path, log: Path, step: int, *extra: str) -> None:
    """Run a worker that stalls while saving checkpoint-`step`, and SIGKILL it there."""
    (out / "saving-now").unlink(missing_ok=True)
    process = worker(out, log, *extra, "slow-save-at-step", str(step))
    wait_for(lambda: (out / "saving-now").exists(), process)
    process.send_signal(signal.SIGKILL)
    process.wait()


@pytest.mark.slow
def test_killed_during_a_checkpoint_write_then_again_while_resuming_then_resume(tmp_path, uninterrupted):
    """Killed mid-save of checkpoint-6: the resume sets it aside as incomplete-checkpoint-6, continues from
    checkpoint-4 with the uninterrupted losses, and is killed mid-save of the new checkpoint-6, which must be set
    aside beside the first (it once raised 'Directory not empty'); the last resume finishes the run."""
    out = tmp_path / "out"
    kill_mid_save(out, tmp_path / "first.jsonl", 6)
    assert (out / "checkpoint-6" / "model.safetensors").exists(), "the kill must land mid-save"
    assert not (out / "checkpoint-6" / "optimizer.pt").exists()

    kill_mid_save(out, tmp_path / "second.jsonl", 6, "resume")
    resumed_once = read_losses(tmp_path / "second.jsonl")
    assert sorted(resumed_once) == [5, 6], "the half-written checkpoint-6 is skipped; resume from checkpoint-4"
    for step, loss in resumed_once.items():
        assert loss == pytest.approx(uninterrupted[step], rel=1e-6), (step, loss, uninterrupted[step])
    assert (out / "incomplete-checkpoint-6").is_dir() and (out / "checkpoint-6" / "turbotrain-writing").exists()

    resumed_log = tmp_path / "resumed.jsonl"
    finish(worker(out, resumed_log, "resume"))
    resumed = read_losses(resumed_log)
    assert min(resumed) == 5, "both half-written checkpoint-6 are skipped; resume from checkpoint-4"
    assert len(list(out.glob("incomplete-checkpoint-6*"))) == 2
    assert_resumed_like_uninterrupted(resumed, uninterrupted)
