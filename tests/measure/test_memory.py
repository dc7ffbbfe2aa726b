"""The memory split: weights, gradients and optimizer state read from the run, logits as counted, the rest."""

from __future__ import annotations

import torch
from torch import nn

from turbotrain.measure.memory import MB, optimizer_state_bytes, parameter_bytes, split_growth


def test_split_reads_parameters_gradients_and_optimizer_state():
    model = nn.Sequential(nn.Embedding(1000, 64), nn.Linear(64, 64))
    model[0].weight.requires_grad_(False)  # a frozen table: weights, but no gradient
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    model[1](torch.ones(2, 64)).sum().backward()
    optimizer.step()
    trainable = (64 * 64 + 64) * 4
    assert parameter_bytes(model) == (1000 * 64) * 4 + trainable
    assert parameter_bytes(model, trainable_only=True) == trainable
    assert optimizer_state_bytes(optimizer) >= 2 * trainable  # exp_avg and exp_avg_sq (+ step counters)
    growth = 10.0
    split = split_growth(growth, model, optimizer, logits_bytes=MB)
    parts = split.weights_mb + split.gradients_mb + split.optimizer_mb + split.logits_mb
    assert split.logits_mb == 1.0 and split.activations_mb == growth - parts
    assert split_growth(0.0, model, optimizer, None).activations_mb == 0.0  # never below 0
    assert split_growth(0.0, model, optimizer, None).logits_mb is None


PEAK_PROBE = """
import torch
from turbotrain.measure.memory import PeakMemory
memory = PeakMemory(torch.device("cpu"))
if memory.kind == "peak RSS":
    memory.reset()
    held = memory.current_mb()
    block = torch.ones(64 * 2**20 // 4)  # 64 MB, touched
    assert memory.peak_mb() >= held + 60, (memory.peak_mb(), held)
    del block
print("ok")
"""


def test_peak_and_current_resident_memory_on_cpu():
    # in a fresh process: in the suite's, earlier tests leave freed memory resident that the block reuses
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", PEAK_PROBE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]
