"""Shared by the reliability probes (scripts/reliability.py): the outcomes, a probe, and the judges that
turn what a call or a command did into an outcome."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLEAR, RIGHT, TRACEBACK, WRONG, LOST, SKIPPED = (
    "clear message",
    "right behaviour",
    "traceback",
    "silent wrong",
    "data lost",
    "skipped",
)
OUTCOMES = (CLEAR, RIGHT, TRACEBACK, WRONG, LOST, SKIPPED)


@dataclass
class Probe:
    kind: str
    name: str
    expected: str
    run: Callable[[Path], tuple[str, str]]  # scratch folder -> (outcome, note)


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0][:110] if text else ''}"


def raises_clearly(call: Callable, pattern: str, types=(ValueError, KeyError, OSError, FloatingPointError)):
    """Outcome of a call that must be refused: CLEAR when it raises one of `types` matching `pattern`."""
    try:
        call()
    except types as error:
        return (CLEAR if re.search(pattern, str(error)) else TRACEBACK), first_line(error)
    except Exception as error:  # noqa: BLE001 - the probe reports whatever it was
        return TRACEBACK, first_line(error)
    return WRONG, "accepted without a word"


def cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`turbotrain ARGV` in a subprocess; a run past `timeout` is killed and reported as exit code -9."""
    command = [sys.executable, "-m", "turbotrain.cli", *argv]
    try:
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=os.environ)
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout or ""
        err = expired.stderr.decode() if isinstance(expired.stderr, bytes) else expired.stderr or ""
        return subprocess.CompletedProcess(command, -9, out, err + f"\n(still running after {timeout:.0f} s)")


def judge_refusal(result: subprocess.CompletedProcess, pattern: str = ".") -> tuple[str, str]:
    """A command that must stop with one clear line on stderr and a non-zero exit."""
    err = [line for line in result.stderr.splitlines() if line.strip() and "WARNING" not in line]
    last = err[-1][:110] if err else ""
    if "Traceback" in result.stderr:
        return TRACEBACK, last
    if result.returncode == -9:
        return WRONG, f"not refused: {last.strip('()')}"
    if result.returncode == 0:
        lines = result.stdout.strip().splitlines()
        return WRONG, f"exit 0: {lines[-1][:100] if lines else ''}"
    return (CLEAR if re.search(pattern, result.stderr) else TRACEBACK), last


def cut(name: str, keep: float = 0.5) -> Callable[[Path], None]:
    """Damage: keep the first `keep` of `folder/name` (a write cut off, a full disk)."""

    def damage(folder: Path) -> None:
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: int(len(data) * keep)])

    return damage
