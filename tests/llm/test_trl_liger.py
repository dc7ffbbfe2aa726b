"""TRL's trainers with `use_liger_kernel=True` under turbotrain. TRL 1.16 turns Liger's fused loss off and keeps its
own fused LM head, so Liger patches the layers only (norms, rotary, the gated MLPs): turbotrain answers the fused
calls as without Liger, leaves the MLPs to Liger's and says so, and logs stock's losses with the same Liger. A TRL
release turbotrain did not check with Liger steps aside (integrations/trl/). Liger's kernels are Triton's:
tests/fake_liger.py stands in for them with torch's arithmetic and Liger 0.8.2's patch mechanism."""

from __future__ import annotations

import pytest

from tests import fake_liger
from tests.llm.test_trl import assert_same_history, sft_history
from tests.llm.test_trl_dpo import METRICS, assert_metric_close, dpo_history

pytestmark = pytest.mark.requires_llm


def _assert_liger_layers_only(trainer, calls):
    assert calls and all(not call["fused_linear_cross_entropy"] and call["swiglu"] for call in calls)
    assert "label_sparsity" in trainer.turbo_report.applied  # the fused calls: turbotrain's head answers them
    assert "Liger's SwiGLU" in trainer.turbo_refused["lean_gated_mlp"]
    assert "Liger's SwiGLU" in trainer.turbo_summary()


def test_sft_with_liger_answers_the_fused_calls_and_logs_stocks_history(tmp_path, monkeypatch):
    calls = fake_liger.install(monkeypatch)
    trainer, turbo_logs = sft_history(tmp_path, True, steps=4, use_liger_kernel=True)
    _assert_liger_layers_only(trainer, calls)
    _, stock_logs = sft_history(tmp_path, False, steps=4, use_liger_kernel=True)
    assert_same_history(turbo_logs, stock_logs)


def test_dpo_with_liger_answers_the_fused_calls_and_logs_stocks_metrics(tmp_path, monkeypatch):
    calls = fake_liger.install(monkeypatch)
    trainer, fast = dpo_history(tmp_path, True, use_liger_kernel=True)
    _assert_liger_layers_only(trainer, calls)
    _, stock = dpo_history(tmp_path, False, use_liger_kernel=True)
    for metric in METRICS:
        assert_metric_close(metric, [e[metric] for e in fast], [e[metric] for e in stock])


def test_a_trl_release_not_checked_with_liger_steps_aside(monkeypatch):
    import trl

    from turbotrain.integrations.trl import trainer_facts

    trainer = type("Run", (trl.DPOTrainer,), {"__init__": lambda self: None})()
    trainer.args = trl.DPOConfig(output_dir="unused", use_cpu=True, use_liger_kernel=True)
    assert trainer_facts(trainer).fused_call_weighting == "per_row"
    monkeypatch.setattr(trl, "__version__", "1.15.2")
    assert trainer_facts(trainer).fused_call_weighting is None
    assert (
        "TRL 1.15.2 is not a release turbotrain checked them with" in trainer_facts(trainer).refusals["label_sparsity"]
    )
