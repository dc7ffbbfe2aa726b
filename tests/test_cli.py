"""The command line: the main job end to end (tiny), and clear errors for bad input."""

from __future__ import annotations

import pytest
from transformers import AutoModelForMaskedLM, AutoTokenizer

from turbotrain.cli import main
from turbotrain.pretrain import PretrainConfig, run_pretrain


@pytest.mark.slow
def test_pretrain_tiny_run_saves_a_stock_loadable_model(tmp_path):
    cfg = PretrainConfig(output_dir=str(tmp_path / "out"), vocab_size=1000, hidden_size=32, num_layers=1, num_heads=2,
                         seq_len=32, batch_size=8, max_steps=30, logging_steps=5, warmup_steps=3, progress=False,
                         export_onnx=True)
    result = run_pretrain(cfg)
    assert result.losses[-1] < result.losses[0]
    assert AutoModelForMaskedLM.from_pretrained(str(tmp_path / "out")) is not None
    assert AutoTokenizer.from_pretrained(str(tmp_path / "out")).mask_token == "<mask>"
    assert len(result.predictions) == 3 and all(len(g) == 3 for g in result.predictions.values())
    # --export-onnx: a verified ONNX model with the tokenizer beside it
    assert (tmp_path / "out" / "onnx" / "model.onnx").is_file()
    assert AutoTokenizer.from_pretrained(str(tmp_path / "out" / "onnx")).mask_token == "<mask>"


def test_empty_user_file_exits_with_a_clear_message(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["pretrain", "--files", str(empty), "--output-dir", str(tmp_path / "o"), "--quiet"]) == 2
    assert "no usable text" in capsys.readouterr().err


def test_unknown_backend_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--backend", "tpu"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.onnx
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
