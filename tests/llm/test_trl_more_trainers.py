"""TRL's KTO, ORPO and GRPO trainers through `turbo(...)`: a few steps give the stock trainer's losses (issue 36;
SFT and DPO: test_trl.py). Each computes its own loss, so padding-free steps aside; the other passes keep the
numbers. KTO's fused calls are answered by the per-row op (issue 34), with every logged metric equal to stock's."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.llm.helpers import decoder, prompt_completion_rows, record_op_calls, tokenizer
from tests.trainer_helpers import COMMON, assert_losses_close
from turbotrain import turbo, turbo_arguments

pytestmark = pytest.mark.requires_llm


def both_ways(
    tmp_path, trainer_class, config_class, rows, config=None, ref=False, check_turbo=None, entries=False, **extra
) -> list[list]:
    """Train turbo(trainer_class) and trainer_class on `rows` for 2 steps (`ref`: with a reference model);
    [turbo losses, stock losses] (`entries`: the logged entries instead of the losses). `check_turbo(trainer)`
    runs on the turbo trainer once it is built."""
    losses = []
    config = {"bf16": False, **(config or {})}  # fp32: TRL's default bf16 is emulated here (bf16_emulation.py)
    for made, arguments in ((turbo(trainer_class), turbo_arguments(config_class)), (trainer_class, config_class)):
        args = arguments(output_dir=str(tmp_path / made.__name__), **{**COMMON, "max_steps": 2}, use_cpu=True, **config)
        models = {"model": decoder(), **({"ref_model": decoder()} if ref else {})}
        trainer = made(**models, args=args, train_dataset=rows, processing_class=tokenizer(), **extra)
        if check_turbo is not None and made is not trainer_class:
            check_turbo(trainer)
        trainer.train()
        logged = [entry for entry in trainer.state.log_history if "loss" in entry]
        losses.append(logged if entries else [entry["loss"] for entry in logged])
    return losses


def preference_rows(n: int = 16):
    from datasets import Dataset

    rows = prompt_completion_rows(n)
    rejected = list(reversed(rows["completion"]))
    return Dataset.from_dict({"prompt": rows["prompt"], "chosen": rows["completion"], "rejected": rejected})


def kto_rows():
    from datasets import Dataset

    rows = prompt_completion_rows(16)
    return Dataset.from_dict({**rows.to_dict(), "label": [i % 2 == 0 for i in range(16)]})


def test_kto_trainer_is_answered_by_the_per_row_op_and_gives_the_stock_losses_and_metrics(tmp_path, monkeypatch):
    """KTO makes DPO's fused calls: the policy's (gradient, statistics), and under no_grad the KL pairs' and the
    separate reference model's (log-probs only); every one goes through the per-row op."""
    from trl import KTOConfig, KTOTrainer

    calls = record_op_calls(monkeypatch, lambda args: (args[0].requires_grad, args[6]))

    def answered(trainer):
        active = trainer.turbo_summary().partition("not active")[0]
        assert "label_sparsity" in active and "chunked_cross_entropy" in active
        assert "padding_free (inside scored calls)" in active  # DPO's calls, flushed left: packed inside each
        assert trainer.turbo_report.chunked_cross_entropy.fused_weighting == "per_row"
        assert trainer.turbo_reference is not None, "the reference model's calls are not answered"

    runs = both_ways(tmp_path, KTOTrainer, KTOConfig, kto_rows(), ref=True, check_turbo=answered, entries=True)
    # per step: the policy's call with gradient, its KL pairs' call, the reference's two (KL pairs, completions)
    assert Counter(calls) == {(True, True): 2, (False, True): 2, (False, False): 4}, dict(Counter(calls))
    fast, stock = runs
    metrics = [name for name in stock[0] if name.startswith(("loss", "rewards/", "logps/", "logits/", "kl"))]
    assert {"loss", "kl", "logps/chosen", "logits/rejected"} <= set(metrics), metrics
    for metric in metrics:
        assert_losses_close([e[metric] for e in fast], [e[metric] for e in stock], rtol=1e-5)


def test_kto_trainer_of_another_trl_release_steps_aside_with_the_stock_losses_and_says_why(tmp_path, monkeypatch):
    import trl
    from trl import KTOConfig, KTOTrainer

    monkeypatch.setattr(trl, "__version__", "1.17.0")

    def not_active_with_why(trainer):
        active, _, missing = trainer.turbo_summary().partition("not active")
        assert "label_sparsity" not in active and "chunked_cross_entropy" not in active
        assert "label_sparsity (TRL's KTOTrainer scores its tokens itself" in missing and "TRL 1.17.0" in missing
        assert trainer.turbo_report.label_sparsity is None

    losses = both_ways(tmp_path, KTOTrainer, KTOConfig, kto_rows(), ref=True, check_turbo=not_active_with_why)
    assert_losses_close(*losses)


def test_orpo_trainer_gives_the_stock_losses(tmp_path):
    from trl.experimental import orpo  # TRL 1.x keeps ORPO under experimental (the llm extra pins trl>=1.0)

    assert_losses_close(*both_ways(tmp_path, orpo.ORPOTrainer, orpo.ORPOConfig, preference_rows()))


def test_grpo_trainer_gives_the_stock_losses(tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    def reward_length(completions, **kwargs):
        return [float(len(completion.split())) for completion in completions]

    config = dict(num_generations=2, max_completion_length=6, generation_batch_size=4)
    rows = prompt_completion_rows(16).remove_columns("completion")
    losses = both_ways(tmp_path, GRPOTrainer, GRPOConfig, rows, config=config, reward_funcs=reward_length)
    assert_losses_close(*losses)
