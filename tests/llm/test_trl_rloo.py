"""`turbo(RLOOTrainer)`: TRL's fused_lm_head calls (the policy's log-probs and entropy, its old log-probs and the
reference model's log-probs, both without gradient) answered by the per-row-weighted chunked op on the completion
rows only, with the logits divided by RLOO's sampling temperature as TRL's kernel does; generation stays TRL's.
RLOO weights each sequence's summed log-probs by one factor (advantage, clipping) and puts its KL into the reward.
Against stock RLOOTrainer, same seed, temperature != 1 and a reference model (beta > 0): the losses, the KL and
entropy metrics and every parameter after the steps equal within fp32 float order. Another TRL release steps
aside with the stock numbers and the reason in the summary."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from tests.llm.helpers import decoder, prompt_completion_rows, record_op_calls, tokenizer
from tests.trainer_helpers import COMMON, assert_losses_close
from turbotrain import turbo, turbo_arguments

pytestmark = pytest.mark.requires_llm
TEMPERATURE = 0.7
# sgd: the parameters after the steps differ from stock's by lr x the gradients' float error, which Adam would
# magnify for parameters whose gradient is ~0 (its update is g / sqrt(v), whatever the size of g)
CONFIG = dict(
    num_generations=4,
    max_completion_length=8,
    generation_batch_size=8,
    temperature=TEMPERATURE,
    beta=0.1,
    optim="sgd",
    learning_rate=0.5,
    bf16=False,
)
METRICS = ("loss", "kl", "entropy")


def reward_length(completions, **kwargs):
    return [float(len(completion.split())) for completion in completions]


def saved_decoder(tmp_path):
    """The policy, saved where RLOOTrainer builds its reference model from (`config._name_or_path`)."""
    model = decoder()
    path = tmp_path / "initial"
    model.save_pretrained(path)
    model.config._name_or_path = str(path)
    return model


def rloo_run(tmp_path, with_turbo: bool, steps: int = 3, **config):
    """(trainer, logged entries) of RLOOTrainer or turbo(RLOOTrainer) for `steps` steps."""
    from trl import RLOOConfig, RLOOTrainer

    trainer_class, config_class = (
        (turbo(RLOOTrainer), turbo_arguments(RLOOConfig)) if with_turbo else (RLOOTrainer, RLOOConfig)
    )
    settings = {**COMMON, **CONFIG, "max_steps": steps, **config}
    args = config_class(output_dir=str(tmp_path / str(with_turbo)), use_cpu=True, **settings)
    rows = prompt_completion_rows(16).remove_columns("completion")
    trainer = trainer_class(
        model=saved_decoder(tmp_path),
        reward_funcs=reward_length,
        args=args,
        train_dataset=rows,
        processing_class=tokenizer(),
    )
    trainer.train()
    return trainer, [entry for entry in trainer.state.log_history if "loss" in entry]


@pytest.fixture
def op_calls(monkeypatch):
    """(hidden needs a gradient, statistics wanted, 1 / temperature) of each run of the per-row op."""
    return record_op_calls(monkeypatch, lambda args: (args[0].requires_grad, args[6], args[7]))


def test_rloo_losses_metrics_and_parameters_equal_stock_with_a_temperature_and_a_reference(tmp_path, op_calls):
    stock_trainer, stock = rloo_run(tmp_path, False)
    assert not op_calls
    trainer, fast = rloo_run(tmp_path, True)
    assert trainer.turbo_report.chunked_cross_entropy.fused_weighting == "per_row"
    assert trainer.turbo_reference is not None, "the reference model's calls are not answered"
    # each step: the policy's call (gradient, statistics); each generation (steps 1 and 3: 8 completions scored
    # in batches of 4) two calls of the reference (log-probs only) and two of the policy without gradient (the
    # old log-probs, which RLOO takes at every generation); all with TRL's temperature
    inv_t = 1 / TEMPERATURE
    expected = {(True, True, inv_t): 3, (False, False, inv_t): 4, (False, True, inv_t): 4}
    assert Counter(op_calls) == expected, op_calls
    active = trainer.turbo_summary().partition("not active")[0]
    assert "label_sparsity" in active and "chunked_cross_entropy" in active
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


def test_rloo_answers_at_its_sampling_temperature_and_refuses_liger():
    import trl

    from turbotrain import trl_boundary

    trainer = type("Run", (trl.RLOOTrainer,), {"__init__": lambda self: None})()
    trainer.args = trl.RLOOConfig(output_dir="unused", use_cpu=True, temperature=0.5)
    assert trl_boundary.is_sampling_rl_trainer(trainer) and not trl_boundary.is_grpo_trainer(trainer)
    assert trl_boundary.fused_call_weighting(trainer) == "per_row"
    assert trl_boundary.fused_call_temperature(trainer) == 0.5
    trainer.args.use_liger_kernel = True
    assert trl_boundary.fused_call_weighting(trainer) is None
    assert "Liger" in trl_boundary.unanswered_token_scores(trainer)
