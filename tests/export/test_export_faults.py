"""`turbotrain export` under faults: it writes into a temporary folder beside the target and moves it
into place only after verification, so an earlier export (with --overwrite; refused without) is replaced
whole (no stale variants beside a new model.onnx) and a failed one leaves nothing behind; a missing or
damaged model directory gives one clear line."""

from __future__ import annotations

import pytest

from tests import tiny_models
from tests.folder_snapshot import snapshot
from turbotrain.cli import main

pytestmark = pytest.mark.requires_onnx


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "model"
    tiny_models.make("bert").save_pretrained(str(folder))
    return folder


def listing(folder):
    return sorted(p.name for p in folder.iterdir())


def error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_a_new_export_replaces_the_earlier_one_whole_and_a_failed_one_changes_nothing(
    tmp_path, model_dir, monkeypatch, capsys
):
    """One target folder through its life, each export paid once: an export with variants, a second export
    refused without --overwrite (every file as it was), a plain export with --overwrite that replaces it whole,
    then an export whose verification fails over it and one into a fresh folder."""
    import turbotrain.export.deploy as deploy
    from turbotrain.export.verify import verify_onnx

    out = tmp_path / "onnx"
    assert main(["export", str(model_dir), str(out), "--optimize", "--quantize", "int8"]) == 0
    assert {"model.onnx", "model.optimized.onnx", "model.int8.onnx"} <= set(listing(out))
    first = snapshot(out)
    capsys.readouterr()
    assert main(["export", str(model_dir), str(out)]) == 2
    assert error_line(capsys).startswith(f"turbotrain export: error: {out} already holds an export (model.int8.onnx")
    assert snapshot(out) == first and listing(tmp_path) == ["model", "onnx"]
    assert main(["export", str(model_dir), str(out), "--overwrite"]) == 0
    assert f"--overwrite: {out} holds an export" in capsys.readouterr().out
    assert "model.optimized.onnx" not in listing(out) and "model.int8.onnx" not in listing(out)
    assert listing(tmp_path) == ["model", "onnx"], "no temporary folder is left beside the target"

    before = {name: (out / name).read_bytes() for name in listing(out)}
    monkeypatch.setattr(
        deploy,
        "verify_onnx",
        lambda model, path, tolerance: verify_onnx(tiny_models.make("bert", seed=1), path, tolerance),
    )
    assert main(["export", str(model_dir), str(out), "--optimize", "--overwrite"]) == 1
    assert {name: (out / name).read_bytes() for name in listing(out)} == before
    assert listing(tmp_path) == ["model", "onnx"]
    assert main(["export", str(model_dir), str(tmp_path / "fresh")]) == 1
    assert listing(tmp_path) == ["model", "onnx"], "a failed first export leaves nothing half-written"


def test_a_folder_that_holds_something_else_is_not_replaced(tmp_path, model_dir, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main(["export", str(model_dir), str(out)]) == 2
    assert "not an earlier export" in error_line(capsys)
    assert listing(out) == ["notes.txt"]


def test_a_missing_model_directory_is_one_clear_line(tmp_path, capsys):
    assert main(["export", str(tmp_path / "no-such-model"), str(tmp_path / "onnx")]) == 2
    line = error_line(capsys)
    assert "no-such-model does not exist" in line and "Repo id" not in line


def test_a_truncated_safetensors_is_one_clear_line(tmp_path, model_dir, capsys):
    weights = model_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    assert main(["export", str(model_dir), str(tmp_path / "onnx")]) == 2
    line = error_line(capsys)
    assert "model.safetensors" in line and "cannot be read" in line
    assert not (tmp_path / "onnx").exists()


@pytest.mark.parametrize("tolerance", ["-1", "-0.5", "nan", "inf"])
def test_a_tolerance_that_no_export_can_meet_or_that_accepts_anything_is_refused_up_front(
    tmp_path, model_dir, capsys, tolerance
):
    """Before: -1 and nan exported, verified and printed FAILED (a tolerance no difference meets); inf passed any.
    0 (bit for bit) stays a tolerance: scripts/reliability_inputs.py makes verification fail with it."""
    out = tmp_path / "onnx"
    assert main(["export", str(model_dir), str(out), "--tolerance", tolerance]) == 2
    assert error_line(capsys).startswith("turbotrain export: error: --tolerance must be a finite number >= 0")
    assert not out.exists()
