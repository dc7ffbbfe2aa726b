"""A text-conditioned diffusion UNet trained the way diffusers' `train_text_to_image.py` trains it, per backend.

The step (diffusers' loop without Accelerate and the VAE: latents and text states are given):
    noise ~ N(0, 1); t ~ U{0, T}; noisy = DDPMScheduler.add_noise(latents, noise, t)
    loss = mse(unet(noisy, t, text_states).sample, noise); loss.backward(); AdamW step
The UNet is a `UNet2DConditionModel` built from a config (cross-attention down and up blocks), nothing
downloaded; `turbotrain.compile(unet, backend=...)` puts it on a backend. `run_unet_bench` times
`warmup + steps` steps per backend, interleaved per round from the same weights on the same draws, and
reports ms/step (median), first-step seconds (compilation or export), peak memory and the largest loss
difference from eager. Needs the `diffusion` extra (`pip install 'turbotrain[diffusion]'`).
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from turbotrain.bench.report import environment
from turbotrain.compiled_step import backend_of, compile
from turbotrain.measure.memory import PeakMemory


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


@dataclass
class UNetBench(UNetShape):
    backends: tuple[str, ...] = ("eager", "inductor", "onnxruntime")
    rounds: int = 3
    steps: int = 5
    warmup: int = 1


@dataclass
class BackendRuns:
    seconds: list[float] = field(default_factory=list)
    first_step_s: float | None = None
    losses: list[list[float]] = field(default_factory=list)
    peaks_mb: list[float] = field(default_factory=list)
    report: dict = field(default_factory=dict)


def train_segment(unet, backend: str, bench: UNetBench, runs: BackendRuns, memory: PeakMemory) -> None:
    model = compile(copy.deepcopy(unet), backend=backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    memory.reset()
    losses, seconds = [], []
    for step in range(bench.warmup + bench.steps):
        batch = diffusion_batch(bench, step)
        start = time.perf_counter()
        loss = noise_prediction_loss(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
    if runs.first_step_s is None:
        runs.first_step_s = seconds[0]
    runs.seconds += seconds[bench.warmup :]
    runs.losses.append(losses)
    peak = memory.peak_mb()
    runs.peaks_mb += [peak] if peak is not None else []
    runs.report = backend_of(model).report()


def run_unet_bench(bench: UNetBench, out_dir: str = "bench-unet") -> dict:
    unet = tiny_unet(bench).train()
    memory = PeakMemory(torch.device("cpu"))
    runs = {name: BackendRuns() for name in bench.backends}
    for _ in range(bench.rounds):
        for name in bench.backends:
            train_segment(unet, name, bench, runs[name], memory)
    eager = runs.get("eager")
    rows = {}
    for name, r in runs.items():
        rows[name] = {
            "ms_per_step": 1000 * statistics.median(r.seconds),
            "first_step_s": r.first_step_s,
            "peak_memory_mb": max(r.peaks_mb, default=None),
            "backend_report": r.report,
        }
        if eager is not None:
            pairs = [(a, b) for mine, ref in zip(r.losses, eager.losses) for a, b in zip(mine, ref)]
            rows[name]["max_rel_loss_diff"] = max(abs(a - b) / abs(b) for a, b in pairs)
            rows[name]["ratio_to_eager"] = statistics.median(eager.seconds) / statistics.median(r.seconds)
    result = {
        "bench": asdict(bench),
        "environment": environment(),
        "parameters": sum(p.numel() for p in unet.parameters()),
        "backends": rows,
    }
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "unet.json").write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result, indent=2, default=str))
    return result
