"""Reliability probes of `turbotrain pretrain` (subprocesses, a tiny model on a tiny text file).

These pass once the pretrain work of issue 14 (argument checks, checkpoints, SIGINT/SIGTERM, `--resume`,
non-finite loss stop, writability check and lock file) is merged. See scripts/reliability.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from scripts.reliability_common import CLEAR, LOST, RIGHT, ROOT, SKIPPED, TRACEBACK, WRONG, Probe, cli, judge_refusal

TINY = [
    "--vocab-size",
    "500",
    "--hidden-size",
    "16",
    "--layers",
    "1",
    "--heads",
    "2",
    "--seq-len",
    "128",
    "--batch-size",
    "4",
    "--steps",
    "4",
    "--warmup-steps",
    "1",
    "--logging-steps",
    "2",
    "--quiet",
]
SENTENCES = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "A checkpoint is written after every few steps so that a run can resume.",
    "Tokens are grouped into blocks of equal length before training starts.",
)


def _text(scratch: Path) -> Path:
    path = scratch / "text.txt"
    path.write_text(
        "\n\n".join(f"{SENTENCES[i % 3]} Paragraph {i} adds words {i * 7} and {i * 13}." for i in range(300))
    )
    return path


def _pretrain(scratch: Path, *flags: str, out: str = "out") -> list[str]:
    """Arguments for a tiny run; later flags override TINY's (argparse keeps the last value)."""
    return ["pretrain", "--files", str(_text(scratch)), "--output-dir", str(scratch / out), *TINY, *flags]


def _refused(*flags: str):
    """The message must name the flag (`--seq-len`, `seq_len` or `seq len`), not only fail somewhere."""
    pattern = flags[0].lstrip("-").replace("-", "[-_ ]")
    return lambda scratch: judge_refusal(cli(*_pretrain(scratch, *flags), timeout=90), pattern)


def _valid_run(scratch: Path):
    result = cli(*_pretrain(scratch), timeout=180)
    if result.returncode == 0 and (scratch / "out" / "config.json").is_file():
        return RIGHT, "exit 0, model saved"
    return judge_refusal(result)[0], (result.stderr.strip().splitlines() or [""])[-1][:110]


def _lr_inf(scratch: Path):
    result = cli(*_pretrain(scratch, "--lr", "inf"), timeout=120)
    if result.returncode == 0:
        return WRONG, "exit 0: trained and saved a model with lr=inf"
    return judge_refusal(result, "finite|inf|NaN|nan")


def _read_only_output(scratch: Path):
    if os.geteuid() == 0:
        return SKIPPED, "running as root: permissions do not stop root"
    out = scratch / "out"
    out.mkdir()
    out.chmod(0o555)
    try:
        return judge_refusal(cli(*_pretrain(scratch), timeout=120), "writ|permission|Permission")
    finally:
        out.chmod(0o755)


def _popen(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "turbotrain.cli", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


LONG = ("--steps", "100000")  # longer than any probe waits: the run is stopped by the probe


def _two_runs_one_dir(scratch: Path):
    first = _popen(_pretrain(scratch, *LONG))
    deadline = time.monotonic() + 60
    while not (scratch / "out").exists() and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.2)
    second = cli(*_pretrain(scratch, *LONG), timeout=60)
    first.kill()
    first.communicate()
    if second.returncode == -9:
        return WRONG, "the second run into the same folder was not refused (still training after 60 s)"
    return judge_refusal(second, "lock|already|another")


def _second_run_into_a_finished_dir(scratch: Path):
    """Issue 46: the same command again into a finished run's folder is refused, every file as it was."""
    first = cli(*_pretrain(scratch), timeout=180)
    if first.returncode != 0:
        return judge_refusal(first)[0], "the first run failed: " + (first.stderr.strip().splitlines() or [""])[-1][:80]
    before = {p: p.read_bytes() for p in (scratch / "out").rglob("*") if p.is_file()}
    second = cli(*_pretrain(scratch), timeout=180)
    if {p: p.read_bytes() for p in (scratch / "out").rglob("*") if p.is_file()} != before:
        return LOST, f"exit {second.returncode}: the first run's files were changed or deleted"
    return judge_refusal(second, "--resume.*--overwrite")


def _sigint_then_resume(scratch: Path):
    """SIGINT once a checkpoint exists (or after 60 s); the run must stop cleanly with one saved, and
    `--resume` must continue from it to 4 steps past it."""
    process = _popen(_pretrain(scratch, *LONG))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None and not _checkpoints(scratch):
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    if "Traceback" in err:
        return TRACEBACK, [line for line in err.splitlines() if line.strip()][-1][:110]
    if not _checkpoints(scratch):
        return WRONG, f"exit {process.returncode}, no checkpoint saved"
    last = _checkpoints(scratch)[-1]
    resumed = cli(*_pretrain(scratch, "--steps", str(last + 4), "--resume"), timeout=240)
    if resumed.returncode != 0:
        return judge_refusal(resumed)[0], (resumed.stderr.strip().splitlines() or [""])[-1][:110]
    return RIGHT, f"stopped on SIGINT with checkpoint-{last}; --resume trained to step {last + 4}"


def _checkpoints(scratch: Path) -> list[int]:
    steps = (p.name.removeprefix("checkpoint-") for p in (scratch / "out").glob("checkpoint-*"))
    return sorted(int(step) for step in steps if step.isdigit())


def pretrain_probes() -> list[Probe]:
    bad = {
        "--steps 0": ["--steps", "0"],
        "--steps -1": ["--steps", "-1"],
        "--seq-len 0": ["--seq-len", "0"],
        "--seq-len 1": ["--seq-len", "1"],
        "--seq-len 8": ["--seq-len", "8"],
        "--heads 0": ["--heads", "0"],
        "--hidden-size 0": ["--hidden-size", "0"],
        "--layers 0": ["--layers", "0"],
    }
    probes = [Probe("pretrain", "a valid tiny run (the baseline of the others)", RIGHT, _valid_run)]
    probes += [Probe("pretrain", name, CLEAR, _refused(*flags)) for name, flags in bad.items()]
    probes += [
        Probe("pretrain", "--lr inf", CLEAR, _lr_inf),
        Probe("pretrain", "read-only existing --output-dir", CLEAR, _read_only_output),
        Probe("pretrain", "two runs into one --output-dir at once", CLEAR, _two_runs_one_dir),
        Probe("pretrain", "a second run into a finished --output-dir", CLEAR, _second_run_into_a_finished_dir),
        Probe("pretrain", "SIGINT mid-run, then --resume", RIGHT, _sigint_then_resume),
    ]
    return probes
