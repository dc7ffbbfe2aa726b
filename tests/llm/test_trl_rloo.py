"""`turbo(RLOOTrainer)`: TRL's fused_lm_head calls (the policy's log-probs and entropy, its old log-probs and the
reference model's log-probs, both without gradient) answered by the per-row-weighted chunked op on the completion
rows only, with the logits divided by RLOO's sampling temperature as TRL's kernel does; generation stays TRL's.
RLOO weights each sequence's summed log-probs by one factor (advantage, clipping) and puts its KL into the reward.
Against stock RLOOTrainer, same seed, temperature != 1 and a reference model (beta > 0): the losses, the KL and
entropy metrics and every parameter after the steps equal within fp32 float order. Another TRL release steps
aside with the stock numbers and the reason in the summary."""

from __future__ import annotations

import pytest
import torch

from tests.llm.helpers import (
    assert_every_sampling_call_answered,
    decoder,
    record_sampling_op_calls,
    sampling_run,
)
from tests.trainer_helpers import assert_losses_close
from turbotrain import turbo, turbo_arguments

pytestmark = pytest.mark.requires_llm
METRICS = ("loss", "kl", "entropy")


def rloo_run(tmp_path, with_turbo: bool, steps: int = 3, **config):
    """(trainer, logged entries) of RLOOTrainer or turbo(RLOOTrainer) for `steps` steps."""
    from trl import RLOOConfig, RLOOTrainer

    classes = (turbo(RLOOTrainer), turbo_arguments(RLOOConfig)) if with_turbo else (RLOOTrainer, RLOOConfig)
    return sampling_run(tmp_path, *classes, steps=steps, **config)


@pytest.fixture
def op_calls(monkeypatch):
    return record_sampling_op_calls(monkeypatch)


def test_rloo_losses_metrics_and_parameters_equal_stock_with_a_temperature_and_a_reference(tmp_path, op_calls):
    stock_trainer, stock = rloo_run(tmp_path, False)
    assert not op_calls
    trainer, fast = rloo_run(tmp_path, True)
    assert_every_sampling_call_answered(trainer, op_calls)
    for metric in METRICS:  # RLOO logs its KL at the steps that generate only (1 and 3)
        assert [metric in e for e in fast] == [metric in e for e in stock], metric
        assert_losses_close(
            [e[metric] for e in fast if metric in e], [e[metric] for e in stock if metric in e], rtol=1e-5
        )
    assert stock[-1]["kl"] != 0  # the reference model's term is in the reward of the second generation
    stock_parameters = dict(stock_trainer.model.named_parameters())
    for name, parameter in trainer.model.named_parameters():
        torch.testing.assert_close(parameter, stock_parameters[name], rtol=1e-5, atol=1e-7, msg=name)
    moved = decoder().state_dict()
    assert any(not torch.equal(p, moved[n]) for n, p in trainer.model.named_parameters()), "nothing trained"


def test_rloo_of_another_trl_release_steps_aside_with_the_stock_numbers_and_says_why(tmp_path, op_calls, monkeypatch):
    import trl

    _, stock = rloo_run(tmp_path, False, steps=2)
    monkeypatch.setattr(trl, "__version__", "1.17.0")
    trainer, fast = rloo_run(tmp_path, True, steps=2)
    assert not op_calls and trainer.turbo_report.chunked_cross_entropy is None and trainer.turbo_reference is None
    active, _, missing = trainer.turbo_summary().partition("not active")
    assert "label_sparsity" not in active and "TRL 1.17.0 is not a release" in missing and "RLOOTrainer" in missing
    assert_losses_close([e["loss"] for e in fast], [e["loss"] for e in stock], rtol=1e-5)


def test_rloo_answers_at_its_sampling_temperature_with_or_without_liger():
    import trl

    from turbotrain.integrations.trl import trainer_facts

    trainer = type("Run", (trl.RLOOTrainer,), {"__init__": lambda self: None})()
    trainer.args = trl.RLOOConfig(output_dir="unused", use_cpu=True, temperature=0.5)
    assert trainer_facts(trainer).packs_scored_calls
    assert trainer_facts(trainer).fused_call_weighting == "per_row"
    assert trainer_facts(trainer).fused_call_temperature == 0.5
    trainer.args.use_liger_kernel = (
        True  # TRL 1.16: Liger's layer kernels, TRL's fused head (tests/llm/test_trl_liger.py)
    )
    assert trainer_facts(trainer).fused_call_weighting == "per_row"
