"""Fixtures of the passes' tests."""

from __future__ import annotations

import pytest

from turbotrain.passes import device_timing
from turbotrain.passes.chunked_ce import fused_epilogue


@pytest.fixture
def fused_on_cpu(monkeypatch, tmp_path):
    """The CPU treated as a device that fuses and is timed; the fused functions uncompiled (their Inductor runs
    are tests of their own); `set_times(stock_ms, fused_ms)` what the timing reads. Returns the timings asked for."""
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path))
    monkeypatch.setattr(fused_epilogue, "_chosen", {})
    monkeypatch.setattr(device_timing, "timed_on", lambda device: True)
    monkeypatch.setattr(fused_epilogue, "compiles_on", lambda device: True)
    monkeypatch.setattr(fused_epilogue, "compiled", lambda function: function)
    asked = []

    def set_times(stock_ms, fused_ms):
        def fake(stock_step, pass_step, device):
            stock_step(), pass_step()
            asked.append(device)
            return stock_ms, fused_ms

        monkeypatch.setattr(device_timing, "_medians_ms", fake)
        return asked

    return set_times
