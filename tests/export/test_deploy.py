"""Deployment export: every task the project trains exports with dynamic axes and matches torch within
1e-4 (fp32) on odd shapes (1x1, 3x37, 2x64, right-padded); optimized, fp16 and int8 files are verified
with their own tolerances; a wrong file fails verification."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForTokenClassification, BertModel

from tests import tiny_models
from tests.requires import lazy_module
from turbotrain.export import VerificationError, export_onnx
from turbotrain.export.onnx_graph import failed_op
from turbotrain.export.task_outputs import sample_inputs
from turbotrain.export.verify import verify_onnx

ort = lazy_module("onnxruntime")
pytestmark = pytest.mark.requires_onnx


def token_classifier():
    family, sizes, no_dropout = tiny_models.CONFIGS["bert"]
    torch.manual_seed(0)
    return BertForTokenClassification(BertConfig(vocab_size=tiny_models.VOCAB, num_labels=5, **sizes))


CASES = {
    "masked-lm": lambda: tiny_models.make("roberta"),
    "causal-lm": lambda: tiny_models.make("llama"),
    "sequence-classification": lambda: tiny_models.make("gpt2", task="cls"),
    "token-classification": token_classifier,
}


@pytest.mark.parametrize("task", sorted(CASES))
def test_each_task_exports_and_matches_torch(task, tmp_path):
    model = CASES[task]()
    result = export_onnx(model, tmp_path)
    assert result.task == task
    verification = result.verifications["fp32"]
    assert verification.ok and verification.max_abs_diff <= 1e-4, verification.summary()
    assert set(verification.per_shape) == {"1x1", "3x37", "2x64"}
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    # Batch and sequence are symbolic, not fixed at the export example's 2 x 16.
    assert all(isinstance(d, str) for d in session.get_inputs()[0].shape)


@pytest.fixture(scope="module")
def bert_export(tmp_path_factory):
    """BERT (seed 0) with every variant, exported once for the tests that read it."""
    return export_onnx(
        tiny_models.make("bert"), tmp_path_factory.mktemp("bert"), optimize=True, quantize=("fp16", "int8")
    )


def test_optimized_fp16_and_int8_are_written_and_verified(bert_export):
    result = bert_export
    assert set(result.files) == {"fp32", "optimized", "fp16", "int8"}
    assert all(path.is_file() for path in result.files.values())
    assert result.verifications["optimized"].max_abs_diff <= 1e-4
    assert all(v.ok for v in result.verifications.values())
    assert result.files["int8"].stat().st_size < result.files["fp32"].stat().st_size


def test_a_file_that_does_not_match_the_model_fails(bert_export):
    assert bert_export.files["fp32"].name == "model.onnx"
    other = tiny_models.make("bert", seed=1)
    verification = verify_onnx(other, str(bert_export.files["fp32"]), tolerance=1e-4)
    assert not verification.ok and verification.max_abs_diff > 1e-2


def test_verification_failure_raises(tmp_path, monkeypatch):
    import turbotrain.export.deploy as deploy

    def wrong_model_check(model, path, tolerance):
        return verify_onnx(tiny_models.make("bert", seed=1), path, tolerance)

    monkeypatch.setattr(deploy, "verify_onnx", wrong_model_check)
    with pytest.raises(VerificationError, match="does not match torch"):
        export_onnx(tiny_models.make("bert"), tmp_path)


def test_models_without_a_task_head_are_refused(tmp_path):
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    with pytest.raises(ValueError, match="turbotrain exports these tasks"):
        export_onnx(BertModel(config), tmp_path)


def test_unknown_quantization_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown quantization"):
        export_onnx(tiny_models.make("bert"), tmp_path, quantize=("int4",))


def test_sample_inputs_are_right_padded_with_a_full_first_row():
    input_ids, mask = sample_inputs(tiny_models.make("bert"), batch=4, length=9, seed=3)
    assert input_ids.shape == mask.shape == (4, 9)
    assert mask[0].all()
    assert all(np.all(np.diff(row.numpy()) <= 0) for row in mask)  # ones then zeros


def test_failed_op_is_read_from_exporter_messages():
    message = (
        "No ONNX function found for <OpOverload(op='aten._scaled_dot_product_flash_attention_for_cpu', "
        "overload='default')>. Failure message"
    )
    assert failed_op(RuntimeError(message)) == "aten._scaled_dot_product_flash_attention_for_cpu.default"
    assert failed_op(RuntimeError("something else")) is None
