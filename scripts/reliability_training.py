"""Reliability probes of training state: SIGKILL-and-resume loops in subprocesses (the test suite's
resume worker) and damaged checkpoints resumed in process. See scripts/reliability.py."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from scripts.reliability_common import CLEAR, RIGHT, ROOT, TRACEBACK, WRONG, Probe, cut

# ---------------------------------------------------------------- kill and resume (subprocesses)


def _worker(out: Path, log: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.scale.resume_worker", str(out), str(log), *extra],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _losses(path: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, path.read_text().splitlines())} if path.exists() else {}


def _wait(condition, process, timeout=300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"worker ended early: {process.stderr.read()[-300:]}")
        time.sleep(0.05)


def _finish(process) -> str | None:
    _, err = process.communicate(timeout=600)
    return None if process.returncode == 0 else err.strip().splitlines()[-1][:110]


_UNINTERRUPTED: dict[int, float] = {}


def _uninterrupted(scratch: Path) -> dict[int, float]:
    if not _UNINTERRUPTED:
        _finish(_worker(scratch / "full", scratch / "full.jsonl"))
        _UNINTERRUPTED.update(_losses(scratch / "full.jsonl"))
    return _UNINTERRUPTED


def _kill_then_resume(scratch: Path, kills: list[tuple[str, int]]) -> tuple[str, str]:
    """SIGKILL the worker once per entry ("step", n: after step n; "save", n: inside checkpoint-n's write)."""
    full, out = _uninterrupted(scratch.parent), scratch / "out"
    for number, (where, step) in enumerate(kills):
        log, extra = scratch / f"run{number}.jsonl", ["resume"] if number else []
        (out / "saving-now").unlink(missing_ok=True)
        if where == "save":
            process = _worker(out, log, *extra, "slow-save-at-step", str(step))
            _wait(lambda: (out / "saving-now").exists(), process)
        else:
            process = _worker(out, log, *extra)
            _wait(lambda log=log, step=step: max(_losses(log), default=0) >= step, process)
        process.send_signal(signal.SIGKILL)
        process.wait()
    error = _finish(_worker(out, scratch / "resumed.jsonl", "resume"))
    if error is not None:
        return TRACEBACK, error
    resumed = _losses(scratch / "resumed.jsonl")
    worst = max(abs(loss - full[step]) / abs(full[step]) for step, loss in resumed.items())
    if max(resumed) != max(full) or worst > 1e-6:
        return WRONG, f"resumed losses differ from the uninterrupted run by {worst:.1e} relative"
    return RIGHT, f"{len(kills)} SIGKILL, resumed from step {min(resumed)}; losses equal (max rel diff {worst:.0e})"


def kill_probes() -> list[Probe]:
    cases = {
        "SIGKILL after step 7, resume": [("step", 7)],
        "SIGKILL twice at different steps, resume twice": [("step", 3), ("step", 9)],
        "SIGKILL inside the write of checkpoint-6, resume": [("save", 6)],
        "SIGKILL twice inside the write of the same checkpoint-6": [("save", 6), ("save", 6)],
    }
    return [Probe("kill", name, RIGHT, lambda s, k=kills: _kill_then_resume(s, k)) for name, kills in cases.items()]


# ---------------------------------------------------------------- damaged checkpoints (in process)


def _finished_run(scratch: Path, stock: bool = False) -> Path:
    from tests.trainer_helpers import stock_trainer, turbo_trainer

    folder = scratch.parent / ("stock-run" if stock else "turbo-run")
    if not folder.exists():
        (stock_trainer if stock else turbo_trainer)(
            "bert", folder, max_steps=4, save_strategy="steps", save_steps=2
        ).train()
    return folder / ("stock" if stock else "turbo")


def _resume_damaged(scratch: Path, damage: Callable[[Path], None], stock=False, explicit=False) -> tuple[str, str]:
    from tests.trainer_helpers import StepRecorder, turbo_trainer

    out = scratch / "turbo"
    shutil.copytree(_finished_run(scratch, stock), out)
    damage(out / "checkpoint-4")
    trainer = turbo_trainer("bert", scratch, max_steps=6, save_strategy="steps", save_steps=2)
    recorder = StepRecorder()
    trainer.add_callback(recorder)
    target = str(out / "checkpoint-4") if explicit else True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.train(resume_from_checkpoint=target)
        except ValueError as error:
            return CLEAR, str(error).split(": ", 1)[-1][:110]
        except Exception as error:  # noqa: BLE001
            return TRACEBACK, f"{type(error).__name__}: {str(error)[:100]}"
    said = [str(w.message) for w in caught if "checkpoint-4" in str(w.message)]
    first = recorder.steps[0] if recorder.steps else None
    if stock:
        return (RIGHT if said and first == 5 else WRONG), (
            said[0][-110:] if said else f"resumed at step {first}, no word"
        )
    if first == 3 and len(said) == 1:
        return RIGHT, said[0].split(": ", 2)[-1][:110]
    return WRONG, f"resumed at step {first} with {len(said)} warnings"


def checkpoint_probes() -> list[Probe]:
    damages = {
        "truncated model.safetensors": cut("model.safetensors"),
        "truncated optimizer.pt": cut("optimizer.pt"),
        "deleted optimizer.pt": lambda f: (f / "optimizer.pt").unlink(),
        "deleted scheduler.pt": lambda f: (f / "scheduler.pt").unlink(),
        "garbage trainer_state.json": lambda f: (f / "trainer_state.json").write_text("{not json"),
        "deleted trainer_state.json": lambda f: (f / "trainer_state.json").unlink(),
    }
    probes = [
        Probe("checkpoint", f"{name}, resume=True", RIGHT, lambda s, d=d: _resume_damaged(s, d))
        for name, d in damages.items()
    ]
    probes += [
        Probe(
            "checkpoint",
            "explicit path to a checkpoint with garbage trainer_state.json",
            CLEAR,
            lambda s: _resume_damaged(s, damages["garbage trainer_state.json"], explicit=True),
        ),
        Probe(
            "checkpoint",
            "explicit path that does not exist",
            CLEAR,
            lambda s: _resume_damaged(s, lambda f: shutil.rmtree(f), explicit=True),
        ),
        Probe(
            "checkpoint",
            "stock Trainer checkpoint without optimizer.pt",
            RIGHT,
            lambda s: _resume_damaged(s, lambda f: (f / "optimizer.pt").unlink(), stock=True),
        ),
    ]
    return probes
