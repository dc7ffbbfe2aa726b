"""`turbotrain pretrain` run again into a folder holding a run (issue 46): refused in one line naming --resume
and --overwrite, every file as it was; `--resume` continues it, `--overwrite` trains into it; a refused or failed
start into a new folder leaves no folder behind. Real runs in process (`main`), two steps of a tiny model on a
tiny text file."""

from __future__ import annotations

import pytest

from tests.folder_snapshot import snapshot
from turbotrain.cli import main

TINY = ["--vocab-size", "500", "--hidden-size", "16", "--layers", "1", "--heads", "2", "--seq-len", "64"]
TINY += ["--batch-size", "4", "--steps", "2", "--save-steps", "1", "--eval-steps", "2", "--warmup-steps", "1"]
TINY += ["--backend", "eager", "--no-plot", "--quiet"]


@pytest.fixture
def argv(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(f"The quick brown fox {i} jumps over the lazy dog {i * 7} times." for i in range(200)))
    return lambda out, *flags: ["pretrain", "--files", str(text), "--output-dir", str(out), *TINY, *flags]


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.slow
def test_a_second_run_is_refused_and_resume_and_overwrite_go_on(tmp_path, argv, capsys):
    out = tmp_path / "out"
    assert main(argv(out)) == 0
    assert {"model.safetensors", "checkpoint-1", "checkpoint-2"} <= {p.name for p in out.iterdir()}
    assert not (out / ".turbotrain.lock").exists()
    before = snapshot(out)
    capsys.readouterr()

    assert main(argv(out)) == 2
    [line] = error_lines(capsys)
    assert line.startswith(f"turbotrain pretrain: error: {out} already holds a run (model.safetensors, ")
    assert "--resume" in line and "--overwrite" in line
    assert snapshot(out) == before, "a refused run changes nothing"

    assert main(argv(out, "--resume")) == 0
    assert main(argv(out, "--overwrite")) == 0
    assert error_lines(capsys)[0].startswith(f"turbotrain pretrain: --overwrite: {out} holds a run (model.safetensors")
    assert main(argv(out, "--overwrite", "--resume")) == 2
    assert "give one of them" in error_lines(capsys)[-1]


@pytest.mark.slow
def test_a_refused_or_failed_start_into_a_new_folder_leaves_no_folder(tmp_path, argv, capsys):
    before = sorted(tmp_path.iterdir())
    assert main(argv(tmp_path / "new" / "out", "--resume")) == 2  # nothing to resume: refused after the lock
    assert "No valid checkpoint found" in error_lines(capsys)[-1]
    assert main([*argv(tmp_path / "new" / "out"), "--files", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in error_lines(capsys)[-1]
    assert sorted(tmp_path.iterdir()) == before
