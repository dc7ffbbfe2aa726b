"""The command line: clear errors for bad input (the main job end to end: tests/pretrain/)."""

from __future__ import annotations

import pytest

from turbotrain.cli import main


def test_empty_user_file_exits_with_a_clear_message(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["pretrain", "--files", str(empty), "--output-dir", str(tmp_path / "o"), "--quiet"]) == 2
    assert "no usable text" in capsys.readouterr().err


def test_unknown_backend_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--backend", "tpu"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.requires_onnx
def test_export_command_writes_a_verified_model_and_the_tokenizer(tmp_path, capsys):
    from tests import tiny_models

    model_dir = tmp_path / "model"
    tiny_models.make("roberta").save_pretrained(str(model_dir))
    assert main(["export", str(model_dir), str(tmp_path / "onnx")]) == 0
    out = capsys.readouterr().out
    assert "model.onnx" in out and "ok" in out
    assert (tmp_path / "onnx" / "model.onnx").is_file() and (tmp_path / "onnx" / "config.json").is_file()


def test_export_command_reports_a_directory_without_a_model(tmp_path, capsys):
    assert main(["export", str(tmp_path), str(tmp_path / "onnx")]) == 2
    assert "turbotrain export: error" in capsys.readouterr().err
