"""`--bf16 on|off|auto`: parsed into the config, auto's decision (flags and CUDA injectable), the
arguments Trainer gets (bf16 and, on a CPU, use_cpu for its autocast), and a tiny bf16 run end to end."""

from __future__ import annotations

import pytest
from rich.console import Console

import turbotrain.pretrain
from turbotrain.cli import main
from turbotrain.pretrain import PretrainConfig, run_pretrain
from turbotrain.pretrain import precision as precision_module
from turbotrain.pretrain.precision import resolve_precision
from turbotrain.pretrain.setup import training_arguments
from turbotrain.training.bf16_hint import bf16_autocast_pays

from .test_job import TINY


@pytest.mark.parametrize("value", ["on", "off", "auto"])
def test_bf16_flag_reaches_the_config(monkeypatch, tmp_path, value):
    seen = []
    monkeypatch.setattr(turbotrain.pretrain, "run_pretrain", lambda cfg: seen.append(cfg) or _Done())
    assert main(["pretrain", "--output-dir", str(tmp_path / "o"), "--bf16", value]) == 0
    assert seen[0].bf16 == value


def test_bf16_default_and_bad_values_are_refused(capsys):
    assert PretrainConfig().bf16 == "off"  # measured: fp32 is faster for the default h128 x 2
    with pytest.raises(ValueError, match="--bf16 must be on, off or auto"):
        PretrainConfig(bf16="yes")
    with pytest.raises(SystemExit):
        main(["pretrain", "--bf16", "maybe"])
    assert "--bf16" in capsys.readouterr().err


def test_auto_uses_bf16_with_amx_tiles_or_a_bf16_gpu_only():
    assert bf16_autocast_pays(frozenset({"avx512f", "amx_tile", "amx_bf16"}), cuda_bf16=False)[0]
    assert not bf16_autocast_pays(frozenset({"avx512f", "avx512_bf16"}), cuda_bf16=False)[0]
    assert not bf16_autocast_pays(frozenset(), cuda_bf16=False)[0]
    assert bf16_autocast_pays(frozenset(), cuda_bf16=True) == (True, "CUDA device supports bf16")


@pytest.mark.parametrize("pays, label", [(True, "bf16 autocast (--bf16 auto: "), (False, "fp32 (--bf16 auto: ")])
def test_auto_follows_the_detection(monkeypatch, pays, label):
    monkeypatch.setattr(precision_module, "bf16_autocast_pays", lambda: (pays, "mocked"))
    chosen = resolve_precision("auto")
    assert chosen.bf16 is pays and chosen.label == label + "mocked)"


def test_trainer_arguments_autocast_on_the_cpu(monkeypatch, tmp_path):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    on = training_arguments(PretrainConfig(bf16="on", max_steps=10, **TINY), str(tmp_path))
    off = training_arguments(PretrainConfig(bf16="off", max_steps=10, **TINY), str(tmp_path))
    assert (on.bf16, on.use_cpu) == (True, True) and (off.bf16, off.use_cpu) == (False, False)


@pytest.mark.slow
def test_tiny_bf16_run_completes_and_says_its_precision(tmp_path):
    console = Console(record=True, width=200)
    cfg = PretrainConfig(output_dir=str(tmp_path / "out"), max_steps=10, bf16="on", plot=False, **TINY)
    result = run_pretrain(cfg, console)
    assert result.exit_code == 0 and result.held_out.loss < 50 and len(result.guesses) == 10
    assert "; bf16 autocast (--bf16 on)" in console.export_text()


class _Done:
    exit_code = 0
