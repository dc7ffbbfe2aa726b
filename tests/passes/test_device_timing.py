"""The device timing of passes that add kernels (passes/device_timing.py): on an accelerator a module shape
whose pass forward measured slower than its own stays stock, said once with both times; the rest keep the pass;
each shape is timed once and cached on disk; the CPU is never timed. Run on the CPU by treating it as timed."""

from __future__ import annotations

import json

import pytest
import torch

from tests.parity import assert_same, loss_and_grads
from tests.tiny_models import make, padded_batch
from turbotrain import optimize
from turbotrain.passes import device_timing
from turbotrain.utils.warnings import TurbotrainWarning


@pytest.fixture
def timed_cpu(monkeypatch, tmp_path):
    """The CPU timed as an accelerator is, with the pass's time per shape chosen by the test (`slower_when(what)`:
    the measured shape, dtype and precision)."""
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path))
    monkeypatch.setattr(device_timing, "timed_on", lambda device: True)
    timed = []

    def set_times(slower_when):
        def fake(stock_step, pass_step, device):
            timed.extend([stock_step, pass_step])
            return 1.0, (2.0 if slower_when(current[0]) else 0.5)  # (stock's median, the pass's)

        real = device_timing.measured
        current = [None]

        def measured(pass_name, device, what, stock_step, pass_step):
            current[0] = (pass_name, *what)
            return real(pass_name, device, what, stock_step, pass_step)

        monkeypatch.setattr(device_timing, "_medians_ms", fake)
        monkeypatch.setattr(device_timing, "measured", measured)
        return timed

    return set_times


def _lora_model():
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = make("llama", dropout=False)
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "o_proj"])
    return get_peft_model(base, config)


@pytest.mark.requires_llm
def test_lora_shapes_measured_slower_keep_pefts_forward_the_rest_fuse(timed_cpu, tmp_path):
    timed = timed_cpu(lambda what: what[:2] == ("fused_lora", "LoRA") and what[2] != what[3])  # v_proj (GQA): slower
    model = _lora_model()
    stock = _lora_model()
    with pytest.warns(TurbotrainWarning, match="fused_lora leaves the module shapes it measured slower"):
        report = optimize(model, padding_free=False, label_sparsity=False)
    fused = report.fused_lora.modules
    assert fused and all(layer.in_features == layer.out_features for layer in fused)
    assert len(fused) < len([m for m in model.modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")])
    shapes = {json.dumps(entry["shape"]) for entry in json.loads((tmp_path / device_timing.CACHE_FILE).read_text()).values()
              if entry["pass"] == "fused_lora"}  # fmt: skip
    assert len(shapes) == 2  # q/o (32 -> 32) and v (32 -> 16): each shape timed once
    count = len(timed)
    optimize(_lora_model(), padding_free=False, label_sparsity=False)  # a later run: the cached verdicts
    assert len(timed) == count
    batch = padded_batch([5, 9, 3], keep=0.7)
    assert_same(loss_and_grads(stock, batch), loss_and_grads(model, batch), rtol=1e-5, atol=1e-6)


def test_a_pass_slower_on_every_shape_is_not_installed(timed_cpu):
    timed_cpu(lambda what: True)
    with pytest.warns(TurbotrainWarning, match="lean_gated_mlp leaves the module shapes"):
        report = optimize(make("llama", dropout=False), padding_free=False)
    assert report.lean_gated_mlp is None and "lean_gated_mlp" not in report.applied


def test_passes_that_pay_install_as_before(timed_cpu):
    timed = timed_cpu(lambda what: False)
    report = optimize(make("llama", dropout=False), padding_free=False)
    assert report.lean_gated_mlp is not None and len(timed) == 2  # one MLP shape: its own forward, the lean one


def test_a_timing_that_raises_leaves_that_shape_stock_and_says_why(timed_cpu, monkeypatch):
    timed_cpu(lambda what: False)

    def out_of_memory(stock_step, pass_step, device):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")

    monkeypatch.setattr(device_timing, "_medians_ms", out_of_memory)
    with pytest.warns(TurbotrainWarning, match="its timing raised OutOfMemoryError: CUDA out of memory"):
        report = optimize(make("llama", dropout=False), padding_free=False)
    assert report.lean_gated_mlp is None  # never slower: the MLP's own forward; the run goes on


def test_a_cache_that_cannot_be_written_keeps_the_verdict_for_the_process(timed_cpu, monkeypatch, tmp_path):
    timed_cpu(lambda what: False)
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(blocker / "cache"))  # under a file: no folder can be made
    with pytest.warns(TurbotrainWarning, match="cannot write the cache"):
        report = optimize(make("llama", dropout=False), padding_free=False)
    assert report.lean_gated_mlp is not None


def test_the_cpu_is_not_timed(monkeypatch, tmp_path):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path))
    monkeypatch.setattr(device_timing, "_medians_ms", lambda *a: pytest.fail("timed on the CPU"))
    report = optimize(make("llama", dropout=False), padding_free=False)
    assert report.lean_gated_mlp is not None and not (tmp_path / device_timing.CACHE_FILE).exists()


def test_a_real_timing_warms_each_step_up_then_alternates_them():
    calls = []
    stock_ms, pass_ms = device_timing._medians_ms(lambda: calls.append("stock"), lambda: calls.append("pass"),
                                                  torch.device("cpu"))  # fmt: skip
    assert stock_ms >= 0 and pass_ms >= 0
    assert calls == ["stock", "pass"] * (1 + device_timing.REPEATS)  # neither always first while clocks settle


def test_a_timing_leaves_the_runs_random_numbers_as_they_were(monkeypatch, tmp_path):
    """Dropout in a timed module, or the timing's random inputs, would shift every later draw of the run (its
    dropout masks, GRPO's sampling) only where the timing was not read from the cache."""
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path))
    monkeypatch.setattr(device_timing, "timed_on", lambda device: True)
    layer = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))

    def steps(module, x):
        return module(x)

    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    device_timing.keep_where_faster("test pass", [layer], lambda m: ("Sequential", 8), lambda m: 8, steps, steps)
    assert (tmp_path / device_timing.CACHE_FILE).exists()  # it did time
    assert torch.equal(torch.rand(4), expected)
