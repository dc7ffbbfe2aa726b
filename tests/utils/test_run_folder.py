"""The rule every run-writing command shares: a folder holding an earlier run is refused in one line naming the
flags, unless --resume (where the command has it) or --overwrite; a new, empty or unrelated folder is fine."""

from __future__ import annotations

import pytest

from tests.folder_snapshot import snapshot
from turbotrain.utils.run_folder import CHECKPOINTS, WEIGHTS, RunFolder

RUN = RunFolder(
    what="a run", marks=(*WEIGHTS, *CHECKPOINTS), folder_flag="--output-dir", replaces="written over", resumable=True
)
REPORT = RunFolder(what="a report", marks=("report.json",), folder_flag="--out", replaces="report.json is rewritten")


def test_a_new_empty_or_unrelated_folder_is_claimed_quietly(tmp_path):
    assert RUN.claim(tmp_path / "new") is None and not (tmp_path / "new").exists()
    assert RUN.claim(tmp_path) is None
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "plan.json").write_text("{}")
    assert RUN.claim(tmp_path) is None
    (tmp_path / "a-file").write_text("")
    assert RUN.held(tmp_path / "a-file") == []


@pytest.mark.parametrize(
    "names",
    [
        ["model.safetensors"],
        ["pytorch_model.bin"],
        ["model-00001-of-00002.safetensors", "model.safetensors.index.json"],
        ["adapter_model.safetensors"],
        ["checkpoint-8"],
        ["incomplete-checkpoint-4"],
        ["model.onnx"],
    ],
)
def test_weights_and_checkpoints_are_an_earlier_run(tmp_path, names):
    for name in names:
        (tmp_path / name).mkdir() if "checkpoint" in name else (tmp_path / name).write_bytes(b"x")
    assert sorted(RUN.held(tmp_path)) == sorted(names)


def test_a_refusal_is_one_line_naming_the_folder_what_it_holds_and_the_flags(tmp_path):
    for step in (2, 4, 6, 8, 10):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    before = snapshot(tmp_path)
    with pytest.raises(ValueError) as refused:
        RUN.claim(tmp_path)
    assert snapshot(tmp_path) == before
    message = str(refused.value)
    assert "\n" not in message and str(tmp_path) in message
    assert "(model.safetensors, checkpoint-2, checkpoint-4, checkpoint-6 and 2 more)" in message
    assert "--resume to continue it or --overwrite to replace it" in message and "--output-dir" in message
    (tmp_path / "report.json").write_text("{}")
    with pytest.raises(ValueError, match=r"holds a report \(report.json\); add --overwrite to replace it, .* --out$"):
        REPORT.claim(tmp_path)


def test_overwrite_says_what_it_replaces_and_resume_goes_on_quietly(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    assert (
        RUN.claim(tmp_path, overwrite=True) == f"--overwrite: {tmp_path} holds a run (model.safetensors); written over"
    )
    assert RUN.claim(tmp_path, resume=True) is None
    (tmp_path / "report.json").write_text("{}")
    with pytest.raises(ValueError, match="--overwrite"):
        REPORT.claim(tmp_path, resume=True)  # a command without --resume: resume means nothing to it
