"""On-device and deployment export for the issue-16 models: a verified ONNX export of a diffusion UNet, and a
clear refusal (naming what is missing) for encoder-decoder models such as a Whisper decoder-only fine-tune."""

from __future__ import annotations

import pytest

from tests.tiny_seq2seq import make
from turbotrain import export_onnx, export_training_artifacts


@pytest.mark.requires_onnx
def test_whisper_decoder_only_artifacts_are_refused_naming_what_is_missing(tmp_path):
    whisper = make("whisper", dropout=False)
    with pytest.raises(ValueError, match="encoder-decoder.*'input_features' plus 'decoder_input_ids'"):
        export_training_artifacts(whisper, tmp_path, trainable=["model.decoder."])
    with pytest.raises(ValueError, match="encoder-decoder"):
        export_onnx(make("bart", dropout=False), tmp_path / "bart")


@pytest.mark.requires_onnx
@pytest.mark.requires_diffusion
def test_unet_export_for_inference_is_verified_against_torch(tmp_path):
    import onnx

    from tests.test_compile_unet import SHAPE
    from turbotrain.bench.workloads.unet import tiny_unet
    from turbotrain.export.diffusion import export_unet_onnx

    exported = export_unet_onnx(tiny_unet(SHAPE), tmp_path / "unet.onnx", text_tokens=SHAPE.text_tokens)
    assert exported.max_rel_diff <= 1e-4
    graph = onnx.load(str(exported.path)).graph
    assert [i.name for i in graph.input] == ["sample", "timestep", "encoder_hidden_states"]
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param  # batch is dynamic
