"""TRL's KTO, ORPO and GRPO trainers through `turbo(...)`: a few steps give the stock trainer's losses (issue 36;
SFT and DPO: test_trl.py). Each computes its own loss, so padding-free steps aside; the other passes keep the
numbers."""

from __future__ import annotations

import pytest

from tests.llm.helpers import decoder, prompt_completion_rows, tokenizer
from tests.trainer_helpers import COMMON, assert_losses_close
from turbotrain import turbo, turbo_arguments

pytestmark = pytest.mark.requires_llm


def both_ways(
    tmp_path, trainer_class, config_class, rows, config=None, ref=False, check_turbo=None, **extra
) -> list[list[float]]:
    """Train turbo(trainer_class) and trainer_class on `rows` for 2 steps (`ref`: with a reference model);
    [turbo losses, stock losses]. `check_turbo(trainer)` runs on the turbo trainer once it is built."""
    losses = []
    config = {"bf16": False, **(config or {})}  # fp32: TRL's default bf16 is emulated here (bf16_emulation.py)
    for made, arguments in ((turbo(trainer_class), turbo_arguments(config_class)), (trainer_class, config_class)):
        args = arguments(output_dir=str(tmp_path / made.__name__), **{**COMMON, "max_steps": 2}, use_cpu=True, **config)
        models = {"model": decoder(), **({"ref_model": decoder()} if ref else {})}
        trainer = made(**models, args=args, train_dataset=rows, processing_class=tokenizer(), **extra)
        if check_turbo is not None and made is not trainer_class:
            check_turbo(trainer)
        trainer.train()
        losses.append([entry["loss"] for entry in trainer.state.log_history if "loss" in entry])
    return losses


def preference_rows(n: int = 16):
    from datasets import Dataset

    rows = prompt_completion_rows(n)
    rejected = list(reversed(rows["completion"]))
    return Dataset.from_dict({"prompt": rows["prompt"], "chosen": rows["completion"], "rejected": rejected})


def test_kto_trainer_gives_the_stock_losses_and_names_label_sparsity_not_active_with_why(tmp_path):
    from datasets import Dataset
    from trl import KTOConfig, KTOTrainer

    rows = prompt_completion_rows(16)
    labelled = Dataset.from_dict({**rows.to_dict(), "label": [i % 2 == 0 for i in range(16)]})

    def not_active_with_why(trainer):
        # KTO's fused calls are not answered (its weighting is not known to turbotrain): no pass changes its head
        active, _, missing = trainer.turbo_summary().partition("not active")
        assert "label_sparsity" not in active and "chunked_cross_entropy" not in active
        assert "label_sparsity (TRL's KTOTrainer scores its tokens itself" in missing
        assert trainer.turbo_report.label_sparsity is None

    losses = both_ways(tmp_path, KTOTrainer, KTOConfig, labelled, ref=True, check_turbo=not_active_with_why)
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
