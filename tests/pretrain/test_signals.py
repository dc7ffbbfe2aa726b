"""SIGINT / SIGTERM during `turbotrain pretrain` (a real subprocess): a committed checkpoint, a clean exit
with the --resume hint, no traceback; `--resume` then finishes the run from that checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FLAGS = [
    "--vocab-size",
    "1000",
    "--hidden-size",
    "32",
    "--layers",
    "1",
    "--heads",
    "2",
    "--seq-len",
    "32",
    "--batch-size",
    "8",
    "--warmup-steps",
    "2",
    "--logging-steps",
    "5",
    "--eval-steps",
    "50",
    "--save-steps",
    "50",
    "--no-plot",
]
SRC = str(Path(__file__).resolve().parents[2] / "src")


def start(out: Path, *extra: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "turbotrain.cli", "pretrain", "--output-dir", str(out), *FLAGS, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def interrupt_when_training(proc: subprocess.Popen, sig: int) -> str:
    """Send `sig` once the progress bar shows steps, return everything the run printed."""
    seen, deadline = "", time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen += line
        if ": loss " in line:  # a loss log line (progress.py: "step 5: loss 6.9, ...")
            proc.send_signal(sig)
            break
    rest, _ = proc.communicate(timeout=120)
    return seen + rest


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_a_checkpoint_and_stops_cleanly(tmp_path, sig, code):
    proc = start(tmp_path / "out", "--steps", "100000")
    output = interrupt_when_training(proc, sig)
    assert proc.returncode == code, output[-2000:]
    assert "Traceback" not in output and "--resume" in output
    checkpoints = sorted((tmp_path / "out").glob("checkpoint-*"))
    assert checkpoints and not (checkpoints[-1] / "turbotrain-writing").exists()
    if sig == signal.SIGINT:  # resume: the run continues from the saved step and finishes
        step = int(checkpoints[-1].name.split("-")[1])
        finish = start(tmp_path / "out", "--steps", str(step + 10), "--resume")
        output, _ = finish.communicate(timeout=300)
        assert finish.returncode == 0, output[-2000:]
        assert (tmp_path / "out" / f"checkpoint-{step + 10}").is_dir() and (
            tmp_path / "out" / "model.safetensors"
        ).exists()
