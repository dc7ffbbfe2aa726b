"""`--task unet`: a text-conditioned diffusion UNet trained the way diffusers' `train_text_to_image.py`
trains it, one peer per backend (`--peers eager inductor onnxruntime`, eager the reference).

The step (diffusers' loop without Accelerate and the VAE: latents and text states are given):
    noise ~ N(0, 1); t ~ U{0, T}; noisy = DDPMScheduler.add_noise(latents, noise, t)
    loss = mse(unet(noisy, t, text_states).sample, noise); loss.backward(); AdamW step
The UNet is a `UNet2DConditionModel` built from a config (cross-attention down and up blocks), nothing
downloaded; `turbotrain.compile(unet, backend=peer)` puts each peer's copy on its backend, and the loop
below is the peer's trainer (its `train()` gives the runner a `PeerRecord`, bench/workload.py). Every
peer trains `warmup + steps` steps from the same weights on the same draws; a step's time is the forward,
backward and AdamW step (the draws are made before it). The throughput counts examples. Needs the
`diffusion` extra (`pip install 'turbotrain[diffusion]'`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from turbotrain.backends import valid_choices
from turbotrain.bench.counting import BatchCounter
from turbotrain.bench.initial_model import fresh_copy
from turbotrain.bench.workload import PeerRecord, Schedule, register_workload
from turbotrain.training.compile_module import backend_of, compile


@dataclass
class UNetShape:
    sample_size: int = 16  # latent height and width
    channels: tuple[int, ...] = (32, 64)  # one down and one up block per entry; the first has cross-attention
    cross_attention_dim: int = 64
    text_tokens: int = 8
    batch_size: int = 4
    train_timesteps: int = 1000
    seed: int = 0


def tiny_unet(shape: UNetShape):
    from diffusers import UNet2DConditionModel

    torch.manual_seed(shape.seed)
    down = ("CrossAttnDownBlock2D", *["DownBlock2D"] * (len(shape.channels) - 1))
    up = (*["UpBlock2D"] * (len(shape.channels) - 1), "CrossAttnUpBlock2D")
    return UNet2DConditionModel(
        sample_size=shape.sample_size,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=tuple(shape.channels),
        down_block_types=down,
        up_block_types=up,
        cross_attention_dim=shape.cross_attention_dim,
        attention_head_dim=8,
        norm_num_groups=8,
    )


def diffusion_batch(shape: UNetShape, step: int) -> dict[str, torch.Tensor]:
    """Latents [B, 4, S, S], text states [B, L, D], noise and timesteps [B] of step `step` (seeded)."""
    from diffusers import DDPMScheduler

    generator = torch.Generator().manual_seed(shape.seed * 100_003 + step)
    size = (shape.batch_size, 4, shape.sample_size, shape.sample_size)
    latents, noise = torch.randn(size, generator=generator), torch.randn(size, generator=generator)
    timesteps = torch.randint(0, shape.train_timesteps, (shape.batch_size,), generator=generator)
    scheduler = DDPMScheduler(num_train_timesteps=shape.train_timesteps)
    text = torch.randn(shape.batch_size, shape.text_tokens, shape.cross_attention_dim, generator=generator)
    return {
        "noisy": scheduler.add_noise(latents, noise, timesteps),
        "timesteps": timesteps,
        "text": text,
        "noise": noise,
    }


def noise_prediction_loss(unet, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    prediction = unet(batch["noisy"], batch["timesteps"], batch["text"], return_dict=False)[0]
    return F.mse_loss(prediction.float(), batch["noise"].float(), reduction="mean")


@register_workload("unet")
@dataclass
class UNet(Schedule, UNetShape):
    peers: tuple[str, ...] = field(
        default=("eager", "inductor", "onnxruntime"), metadata={"help": "backends (turbotrain.compile)"}
    )
    channels: tuple[int, ...] = field(default=(32, 64), metadata={"help": "channels per UNet block"})
    batch_size: int = field(default=4, metadata={"help": "latents per step"})

    reference = "eager"
    unit = "examples"

    def __post_init__(self):
        super().__post_init__()
        self.channels = tuple(self.channels)
        unknown = sorted(set(self.peers) - set(valid_choices()))
        if unknown:
            raise ValueError(f"unknown backends {unknown}; choose from {', '.join(valid_choices())}")

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def model(self):
        return tiny_unet(self).train()

    def data(self) -> None:
        return None  # each step draws its own batch (diffusion_batch)

    def trainer(self, peer: str, model, data, counter: BatchCounter, output_dir: str) -> UNetLoop:
        return UNetLoop(self, compile(fresh_copy(model), backend=peer), counter)

    def title(self) -> str:
        size = self.sample_size
        return f"diffusers UNet2DConditionModel, channels {list(self.channels)}, {size}x{size} latents, batch {self.batch_size} fp32"

    def extras(self, model, data) -> dict:
        return {"parameters": sum(p.numel() for p in model.parameters())}


class UNetLoop:
    """One peer's training loop: diffusers' step on the peer's compiled copy."""

    def __init__(self, workload: UNet, model, counter: BatchCounter):
        self.workload, self.model, self.counter = workload, model, counter
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train(self) -> PeerRecord:
        losses, seconds = [], []
        for step in range(self.workload.warmup + self.workload.steps):
            batch = self.counter.note(diffusion_batch(self.workload, step))
            start = time.perf_counter()
            loss = noise_prediction_loss(self.model, batch)
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            seconds.append(time.perf_counter() - start)
            losses.append(loss.item())
        backend = backend_of(self.model)
        return PeerRecord(seconds, losses, backend.name, backend.report(), model=self.model, optimizer=self.optimizer)
