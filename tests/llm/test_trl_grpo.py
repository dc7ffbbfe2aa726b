"""`turbo(GRPOTrainer)`: TRL's fused_lm_head calls (the policy's log-probs and entropy, the reference model's
log-probs) answered by the per-row-weighted chunked op on the completion rows only, with the logits divided by
GRPO's sampling temperature as TRL's kernel does (passes/chunked_ce/logprobs.py); generation stays TRL's.
Against stock GRPOTrainer, same seed, temperature != 1 and a reference model (beta > 0): the losses, the KL and
entropy metrics and every parameter after the steps equal within fp32 float order."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from tests.llm.helpers import (
    SAMPLING_TEMPERATURE,
    assert_every_sampling_call_answered,
    decoder,
    lora_config,
    record_packed_calls,
    record_sampling_op_calls,
    sampling_run,
)
from tests.trainer_helpers import assert_losses_close
from turbotrain import TurboGRPOConfig, TurboGRPOTrainer

pytestmark = pytest.mark.requires_llm

METRICS = ("loss", "kl", "entropy")


def grpo_run(tmp_path, with_turbo: bool, steps: int = 3, peft_config=None, **config):
    """(trainer, logged entries) of GRPOTrainer or TurboGRPOTrainer for `steps` steps (LoRA with `peft_config`)."""
    from trl import GRPOConfig, GRPOTrainer

    classes = (TurboGRPOTrainer, TurboGRPOConfig) if with_turbo else (GRPOTrainer, GRPOConfig)
    return sampling_run(tmp_path, *classes, steps=steps, peft_config=peft_config, **config)


@pytest.fixture
def op_calls(monkeypatch):
    return record_sampling_op_calls(monkeypatch)


def test_grpo_losses_metrics_and_parameters_equal_stock_with_a_temperature_and_a_reference(
    tmp_path, op_calls, monkeypatch
):
    stock_trainer, stock = grpo_run(tmp_path, False)
    assert not op_calls
    packed = record_packed_calls(monkeypatch)
    trainer, fast = grpo_run(tmp_path, True)
    assert_every_sampling_call_answered(trainer, op_calls)
    # every scored call, the policy's and the reference's, ran packed: real tokens only
    assert len(packed) == len(op_calls) and all(call is not None for call in packed), packed
    assert any(real < padded for real, padded in packed), packed  # some batches had padding to skip
    for metric in METRICS:
        assert_losses_close([e[metric] for e in fast], [e[metric] for e in stock], rtol=1e-5)
    assert stock[-1]["kl"] > 0  # the reference model's term is in the loss
    stock_parameters = dict(stock_trainer.model.named_parameters())
    for name, parameter in trainer.model.named_parameters():
        torch.testing.assert_close(parameter, stock_parameters[name], rtol=1e-5, atol=1e-7, msg=name)
    moved = decoder().state_dict()
    assert any(not torch.equal(p, moved[n]) for n, p in trainer.model.named_parameters()), "nothing trained"


def test_lora_grpo_answers_the_policy_and_its_adapters_off_reference_and_equals_stock(tmp_path, op_calls):
    """With LoRA the reference model is the policy with its adapters off (TRL: no separate `ref_model`): the
    policy's own pass answers both, the frozen head's op computing dh in its forward."""
    stock_trainer, stock = grpo_run(tmp_path, False, peft_config=lora_config())
    assert not op_calls
    trainer, fast = grpo_run(tmp_path, True, peft_config=lora_config())
    assert trainer.turbo_reference is None and trainer.turbo_report.chunked_cross_entropy.fused_weighting == "per_row"
    inv_t = 1 / SAMPLING_TEMPERATURE
    # the trained call each step; at each generation four no-gradient calls for the old log-probs and four for
    # the adapters-off reference, all through the policy's own pass, whose fused head TRL set up with the
    # entropy: the reference's calls ask for it too (TRL's kernel computes it for them as well)
    expected = {(True, True, inv_t): 3, (False, True, inv_t): 8}
    assert Counter(op_calls) == expected, dict(Counter(op_calls))
    # with LoRA (B starts at zero) the policy stays near its adapters-off reference: kl and the loss are ~1e-5,
    # differences of log-probs of size ~ln(vocabulary) whose float-order error is absolute (~4e-9 seen on one
    # thread per process): 1e-5 relative, with a 2e-8 absolute floor
    for metric in METRICS:
        got, expected = ([e[metric] for e in run] for run in (fast, stock))
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=2e-8, msg=metric)
    assert stock[-1]["kl"] > 0
    stock_adapters = {n: p for n, p in stock_trainer.model.named_parameters() if p.requires_grad}
    adapters = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert adapters.keys() == stock_adapters.keys() and any("lora_" in name for name in adapters)
    for name, parameter in adapters.items():
        torch.testing.assert_close(parameter, stock_adapters[name], rtol=1e-5, atol=1e-7, msg=name)


def test_grpo_with_an_entropy_bonus_steps_aside_with_the_stock_numbers_and_says_why(tmp_path, op_calls):
    _, stock = grpo_run(tmp_path, False, steps=2, entropy_coef=0.01)
    trainer, fast = grpo_run(tmp_path, True, steps=2, entropy_coef=0.01)
    assert not op_calls and trainer.turbo_report.chunked_cross_entropy is None and trainer.turbo_reference is None
    active, _, missing = trainer.turbo_summary().partition("not active")
    assert "label_sparsity" not in active and "entropy bonus" in missing
    assert_losses_close([e["loss"] for e in fast], [e["loss"] for e in stock], rtol=1e-5)


def test_another_trl_release_steps_aside(monkeypatch):
    import trl

    from turbotrain.integrations.trl import trainer_facts

    trainer = type("Run", (trl.GRPOTrainer,), {"__init__": lambda self: None})()
    trainer.args = trl.GRPOConfig(output_dir="unused", use_cpu=True)
    assert trainer_facts(trainer).fused_call_weighting == "per_row"
    assert trainer_facts(trainer).fused_call_temperature == trainer.args.temperature
    monkeypatch.setattr(trl, "__version__", "1.17.0")
    assert trainer_facts(trainer).fused_call_weighting is None
    assert "TRL 1.17.0" in trainer_facts(trainer).refusals["label_sparsity"]
