"""`turbotrain.compile` on a diffusers UNet2DConditionModel (text-conditioned, DDPM noise-prediction MSE):
loss and every gradient of a training step equal eager's on each backend, and on onnxruntime every graph
(the backward too: convolution backward; with two blocks, the nearest-upsampling gradient) runs in ONNX
Runtime with no fallback; refusals are clear."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

import turbotrain
from turbotrain.bench.workloads.unet import UNetShape, diffusion_batch, noise_prediction_loss, tiny_unet
from turbotrain.training.compile_module import backend_of

pytestmark = pytest.mark.requires_diffusion
# one cross-attention down block, the mid block, one cross-attention up block: every kind of layer the
# text-to-image UNet has, in the fewest graphs (Inductor compiles this one in ~3 min on 2 busy cores)
SHAPE = UNetShape(
    sample_size=8, channels=(16,), cross_attention_dim=16, text_tokens=5, batch_size=3, train_timesteps=100
)


# two blocks: the first up block ends in nearest x2 upsampling, whose gradient is an accumulating index_put
UPSAMPLING = dataclasses.replace(SHAPE, channels=(16, 16))


def step(unet, draw: int, shape: UNetShape = SHAPE):
    unet.zero_grad(set_to_none=True)
    loss = noise_prediction_loss(unet, diffusion_batch(shape, draw))
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in unet.named_parameters()}


def assert_step_matches(got, expected, rtol=1e-5):
    (loss, grads), (ref_loss, ref_grads) = got, expected
    assert abs(loss - ref_loss) <= rtol * abs(ref_loss)
    assert grads.keys() == ref_grads.keys()
    for name, ref in ref_grads.items():
        scale = ref.abs().max().clamp_min(1e-12)
        assert (grads[name] - ref).abs().max() <= rtol * scale, name


@pytest.mark.requires_compiler
@pytest.mark.slow
def test_unet_training_step_matches_eager_on_inductor():
    unet = tiny_unet(SHAPE).train()
    compiled = turbotrain.compile(copy.deepcopy(unet), backend="inductor")
    for draw in range(2):  # the first call compiles, the second is the steady state
        assert_step_matches(step(compiled, draw), step(unet, draw))
    assert backend_of(compiled).name == "inductor"


@pytest.mark.requires_onnx
def test_unet_with_upsampling_runs_every_graph_in_onnxruntime():
    """The two-block UNet holds every layer kind of the one-block one (cross-attention down and up blocks, the
    mid block) plus the upsampler: one onnxruntime test covers both (it was two, ~50 s each)."""
    unet = tiny_unet(UPSAMPLING).train()
    assert any(name.endswith("upsamplers") for name, _ in unet.named_modules())
    compiled = turbotrain.compile(copy.deepcopy(unet), backend="onnxruntime", backend_options={"cache_dir": None})
    fallbacks = len(backend_of(compiled).report()["fallbacks"])
    for draw in range(2):  # the first call exports and checks, the second is the steady state
        assert_step_matches(step(compiled, draw, UPSAMPLING), step(unet, draw, UPSAMPLING))
    assert backend_of(compiled).name == "onnxruntime"
    assert backend_of(compiled).report()["fallbacks"][fallbacks:] == [], "every graph must run in ONNX Runtime"


def test_eager_is_the_module_itself():
    unet = tiny_unet(SHAPE)
    assert turbotrain.compile(unet, backend="eager") is unet
    assert_step_matches(step(unet, 0), step(copy.deepcopy(unet), 0), rtol=0)


def test_refusals_are_clear():
    with pytest.raises(TypeError, match="nn.Module"):
        turbotrain.compile(lambda x: x)
    with pytest.raises(ValueError, match="unknown backend 'tensorrt'"):
        turbotrain.compile(torch.nn.Linear(2, 2), backend="tensorrt")
    with pytest.raises(ValueError, match="use TurboTrainer"):
        turbotrain.compile(torch.nn.Linear(2, 2), backend="xla")
