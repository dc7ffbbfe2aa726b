"""The main job end to end (tiny model): --compare, metrics, fill-mask ranks, PNG, ONNX, non-finite stop."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForMaskedLM, AutoTokenizer

from turbotrain.pretrain import PretrainConfig, TrainingStopped, run_pretrain
from turbotrain.utils.plotting import is_matplotlib_available

TINY = dict(
    vocab_size=1000,
    hidden_size=32,
    num_layers=1,
    num_heads=2,
    seq_len=32,
    batch_size=8,
    logging_steps=5,
    warmup_steps=2,
    eval_steps=10,
    save_steps=10,
    progress=False,
)


def assert_png(path, min_bytes=10_000):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > min_bytes


@pytest.mark.slow
def test_tiny_run_compares_scores_held_out_tokens_fills_masks_and_plots(tmp_path):
    out = tmp_path / "out"
    result = run_pretrain(PretrainConfig(output_dir=str(out), max_steps=20, compare=True, export_onnx=True, **TINY))
    assert result.exit_code == 0 and [p.step for p in result.curves.held_out] == [10, 20]
    assert result.curves.held_out[-1].value < result.curves.held_out[0].value
    assert 0 <= result.held_out.top1 <= result.held_out.top5 <= 1 and 0 < result.unigram_top1 < result.unigram_top5
    assert len(result.guesses) == 10 and all(1 <= g.rank <= 1000 and len(g.top) == 3 for g in result.guesses)
    assert AutoModelForMaskedLM.from_pretrained(str(out)) is not None
    assert AutoTokenizer.from_pretrained(str(out / "onnx")).mask_token == "<mask>"
    assert (out / "checkpoint-20").is_dir() and not (out / "compare-stock" / "checkpoint-20").exists()
    saved = json.loads((out / "compare.json").read_text())  # --compare: time of both runs to one held-out loss
    assert saved["stock_seconds"] > 0 and saved["turbo_seconds"] > 0 and saved["speedup"] == result.compare.speedup
    if is_matplotlib_available():
        assert_png(result.plot)


@pytest.mark.slow
def test_non_finite_loss_stops_with_a_clear_message_and_keeps_the_good_checkpoint(tmp_path):
    cfg = PretrainConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=40,
        learning_rate=1e38,
        **{**TINY, "warmup_steps": 0, "logging_steps": 1, "save_steps": 1},
    )
    with pytest.raises(TrainingStopped, match=r"training stopped at step \d+: the (loss|grad norm|weights)"):
        run_pretrain(cfg)
    assert not (tmp_path / "out" / "model.safetensors").exists()


@pytest.mark.slow
def test_a_budgeted_tiny_run_trains_its_plan_and_reports_steps_and_minutes(tmp_path):
    from turbotrain.pretrain.budget import Plan, Speed

    out = tmp_path / "out"
    cfg = PretrainConfig(output_dir=str(out), minutes=2, backend="eager", plot=False, **TINY)
    result = run_pretrain(cfg, measure=lambda cfg, prepared: Speed(0.5, 0.1, 0.1))  # a slow machine, faked
    plan = Plan.load(out)
    assert plan.model == "as given" and 50 <= plan.max_steps < 240
    assert result.exit_code == 0 and result.steps == plan.max_steps and result.planned_steps is None
    assert 0 < result.wall_seconds < 120 and result.held_out is not None
