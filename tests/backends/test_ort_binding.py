"""ONNX Runtime binding on the tensors' device (backends/ort_binding.py): dtypes (bf16 by its ONNX number), a CUDA
model refused with the CPU-only wheel, and the preallocated-output path (CUDA's) run on the CPU with eager's
numbers, dynamic sizes (label sparsity's kept rows) and dropout included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests import tiny_models
from tests.parity import assert_same_relative_to_scale, loss_and_grads

pytestmark = pytest.mark.requires_onnx

from turbotrain.backends import BackendUnavailable, ort_binding  # noqa: E402
from turbotrain.backends.onnxruntime import OrtOptions, ort_compiler, ort_config  # noqa: E402
from turbotrain.backends.ort_graph import STATS, OrtConfig  # noqa: E402
from turbotrain.passes import optimize  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_element_types():
    assert ort_binding.element_type(torch.float32) is np.float32
    assert ort_binding.element_type(torch.bfloat16) == ort_binding.ONNX_BFLOAT16 == 16
    with pytest.raises(TypeError, match="complex64"):
        ort_binding.element_type(torch.complex64)


def test_location_and_what_preallocates():
    assert ort_binding.location(torch.zeros(1)) == ("cpu", 0)
    assert not ort_binding.preallocates("cpu", [torch.float32, torch.int64])
    assert ort_binding.preallocates("cpu", [torch.float32, torch.bfloat16])  # numpy holds no bf16
    assert ort_binding.preallocates("cuda", [torch.float32])


def test_a_cuda_model_needs_the_cuda_provider():
    ort_binding.check_device(torch.device("cpu"), ("CPUExecutionProvider",))
    ort_binding.check_device(torch.device("cuda", 0), (ort_binding.CUDA_PROVIDER, "CPUExecutionProvider"))
    for providers in [("CPUExecutionProvider",), ("ROCMExecutionProvider", "CPUExecutionProvider")]:
        with pytest.raises(BackendUnavailable, match="install onnxruntime-gpu"):
            ort_binding.check_device(torch.device("cuda", 0), providers)


def test_the_cpu_wheel_refuses_a_cuda_model_with_one_message():
    import onnxruntime

    if ort_binding.CUDA_PROVIDER in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider")
    with pytest.raises(BackendUnavailable, match="cannot read cuda memory"):
        ort_config(OrtOptions(), torch.device("cuda", 0))
    assert ort_config(OrtOptions(), torch.device("cpu")).device_type == "cpu"


def test_cpu_providers_get_no_options():
    assert ort_binding.provider_options(("CPUExecutionProvider",), None) == [{}]
    assert ort_binding.provider_options((ort_binding.CUDA_PROVIDER, "CPUExecutionProvider"), None) == [{}, {}]


def test_the_cuda_provider_follows_torchs_tf32_setting():
    """ONNX Runtime's CUDA EP defaults TF32 on, torch's matmuls off: fp32 graphs would round differently from eager
    (~1e-3) and fail the first-run check."""
    stream = type("Stream", (), {"device_index": 0, "handle": 1234})()
    providers = (ort_binding.CUDA_PROVIDER, "CPUExecutionProvider")
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        for allowed, expected in ((False, "0"), (True, "1")):
            torch.backends.cuda.matmul.allow_tf32 = allowed
            cuda, cpu = ort_binding.provider_options(providers, stream)
            assert cuda["use_tf32"] == expected and cuda["user_compute_stream"] == "1234" and cpu == {}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_a_session_whose_cuda_provider_did_not_load_is_refused():
    """ONNX Runtime makes a CPU-only session when the CUDA EP's libraries are missing, logging the error."""
    loaded = type("Session", (), {"get_providers": lambda self: ["CPUExecutionProvider"]})()
    ort_binding.require_providers_loaded(loaded, ("CPUExecutionProvider",))
    with pytest.raises(BackendUnavailable, match="could not load CUDAExecutionProvider"):
        ort_binding.require_providers_loaded(loaded, (ort_binding.CUDA_PROVIDER, "CPUExecutionProvider"))


def test_the_first_run_check_allows_half_precisions_rounding_not_more():
    from turbotrain.backends.ort_graph import _first_mismatch

    eager = torch.linspace(-4, 4, 64)
    one_step = eager + 4 * 2**-8  # a bf16 rounding step at the largest value
    assert _first_mismatch([one_step.bfloat16()], [eager.bfloat16()], ["logits"]) is None
    assert _first_mismatch([one_step], [eager], ["logits"]) is not None  # fp32 holds 1e-4
    assert _first_mismatch([(eager + 0.5).bfloat16()], [eager.bfloat16()], ["logits"]) is not None


@pytest.mark.parametrize("case", [("llama", False, True), ("gpt2", True, False)])
def test_outputs_written_into_torch_tensors_give_eagers_numbers(case, monkeypatch):
    family, dropout, label_sparsity = case
    monkeypatch.setattr(ort_binding, "preallocates", lambda device_type, dtypes: True)  # CUDA's output path
    batch = tiny_models.batch(3, 37, keep=0.3, seed=1)
    expected = loss_and_grads(tiny_models.make(family, dropout=dropout), batch)
    model = tiny_models.make(family, dropout=dropout)
    if label_sparsity:
        optimize(model, padding_free=False, embedding_grad=False)
    fallbacks = len(STATS.fallbacks)
    model.compile(backend=ort_compiler(OrtConfig(cache_dir=None)))
    assert_same_relative_to_scale(expected, loss_and_grads(model, batch), 1e-5)
    if label_sparsity:  # other sizes: outputs sized from this call's inputs (dynamic rows and length)
        other = tiny_models.batch(2, 21, keep=0.5, seed=2)
        stock = loss_and_grads(tiny_models.make(family, dropout=dropout), other)
        assert_same_relative_to_scale(stock, loss_and_grads(model, other), 1e-5)
    assert STATS.fallbacks[fallbacks:] == []
