"""One measured process of the on-device benchmark (`turbotrain.bench.ondevice`).

    python -m turbotrain.bench.ondevice_worker ondevice ARTIFACTS STEPS WARMUP BATCH SEQ
    python -m turbotrain.bench.ondevice_worker torch ARTIFACTS STEPS WARMUP BATCH SEQ   (reads ARTIFACTS/torch-model)

Prints one JSON line: median step milliseconds, losses, peak resident memory of the whole process.
In `ondevice` mode torch is made unimportable before anything is imported, as on a device without it.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

if len(sys.argv) > 1 and sys.argv[1] == "ondevice":
    sys.modules["torch"] = None  # type: ignore[assignment]

import numpy as np  # noqa: E402


def peak_rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def batches(count: int, batch: int, seq: int, vocab: int, labels: int):
    rng = np.random.default_rng(0)
    for _ in range(count):
        yield {
            "input_ids": rng.integers(3, vocab, (batch, seq), dtype=np.int64),
            "attention_mask": np.ones((batch, seq), dtype=np.int64),
            "labels": rng.integers(0, labels, (batch,), dtype=np.int64),
        }


def run_ondevice(artifacts: str, data):
    from turbotrain import ondevice

    module = ondevice.Module(artifacts)
    optimizer = ondevice.AdamW(module)

    def step(batch):
        loss = module.train_step(batch)
        optimizer.step()
        return loss

    return step


def run_torch(artifacts: str, data):
    import torch
    from transformers import AutoModelForSequenceClassification

    from turbotrain.ondevice.manifest import Manifest

    manifest = Manifest.load(artifacts)
    model = AutoModelForSequenceClassification.from_pretrained(f"{artifacts}/torch-model").train()
    for name, param in model.named_parameters():
        param.requires_grad_(name in manifest.trainable)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-5)

    def step(batch):
        loss = model(**{k: torch.from_numpy(v) for k, v in batch.items()}).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()

    return step


def main() -> None:
    mode, artifacts = sys.argv[1], sys.argv[2]
    steps, warmup, batch, seq = map(int, sys.argv[3:7])
    vocab, labels = map(int, sys.argv[7:9])
    data = list(batches(steps + warmup, batch, seq, vocab, labels))
    step = (run_ondevice if mode == "ondevice" else run_torch)(artifacts, data)
    times, losses = [], []
    for i, b in enumerate(data):
        start = time.perf_counter()
        losses.append(step(b))
        if i >= warmup:
            times.append(time.perf_counter() - start)
    print(
        json.dumps(
            {
                "mode": mode,
                "step_ms": 1000 * statistics.median(times),
                "losses": losses,
                "peak_rss_mb": peak_rss_mb(),
                "torch_loaded": sys.modules.get("torch") is not None,
            }
        )
    )


if __name__ == "__main__":
    main()
