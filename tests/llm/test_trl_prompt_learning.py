"""PEFT prompt learning through `turbo(SFTTrainer)`: TRL's own `test_prompt_tuning` and `test_prompt_tuning_peft_model`
(tests/test_sft_trainer.py) passed stock and failed with turbotrain's classes patched in: prompt tuning prepends 8
virtual tokens, and padding-free's install check indexed the [B, 8 + L, V] logits with the [B, L] mask. Here the
same set-ups (a language-modeling dataset, `PromptTuningConfig(num_virtual_tokens=8)` given to the trainer or a model
already wrapped by `get_peft_model`) train with stock's losses step by step, the base model frozen and the prompt
encoder trained as TRL's test checks, and padding-free and label sparsity step aside with the reason. Prefix tuning
keeps its virtual tokens in the cache: label sparsity stays on there, padding-free steps aside."""

from __future__ import annotations

import pytest
import torch

from tests.llm.helpers import decoder, prompt_completion_rows, tokenizer
from tests.trainer_helpers import COMMON, assert_losses_close
from turbotrain import modeling, turbo, turbo_arguments
from turbotrain.utils.warnings import TurbotrainWarning

pytestmark = pytest.mark.requires_llm
VIRTUAL_TOKENS = 8
STEPS = 4


def prompt_tuning():
    from peft import PromptTuningConfig

    return PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=VIRTUAL_TOKENS)


def p_tuning():
    """TRL's own two tests use this one: `PromptEncoderConfig`, an MLP encoder of the virtual tokens."""
    from peft import PromptEncoderConfig

    return PromptEncoderConfig(task_type="CAUSAL_LM", num_virtual_tokens=VIRTUAL_TOKENS)


def prefix_tuning():
    from peft import PrefixTuningConfig

    return PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=VIRTUAL_TOKENS)


def text_rows():
    """TRL's test data is `standard_language_modeling`: one `text` column."""
    return prompt_completion_rows(24).map(
        lambda row: {"text": f"{row['prompt']} {row['completion']}"}, remove_columns=["prompt", "completion"]
    )


def run(tmp_path, with_turbo: bool, wrapped: bool = False, peft_config=prompt_tuning, **config):
    """(trainer, losses, parameters before) of `STEPS` SFT steps with `peft_config` given to the trainer, or with a
    model already wrapped by `get_peft_model` (`wrapped`)."""
    from peft import get_peft_model
    from trl import SFTConfig, SFTTrainer

    trainer_class = turbo(SFTTrainer) if with_turbo else SFTTrainer
    config_class = turbo_arguments(SFTConfig) if with_turbo else SFTConfig
    args = config_class(
        output_dir=str(tmp_path / str(with_turbo)), **{**COMMON, "max_steps": STEPS}, use_cpu=True, bf16=False, **config
    )
    model = get_peft_model(decoder(), peft_config()) if wrapped else decoder()
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=text_rows(),
        processing_class=tokenizer(),
        peft_config=None if wrapped else peft_config(),
    )
    before = {name: parameter.detach().clone() for name, parameter in trainer.model.named_parameters()}
    trainer.train()
    return trainer, [entry["loss"] for entry in trainer.state.log_history if "loss" in entry], before


def assert_only_the_prompt_encoder_trained(trainer, before):
    """TRL's own check: the base model's weights as they were, the prompt encoder's changed."""
    for name, parameter in before.items():
        now = trainer.model.get_parameter(name)
        if "base_model" in name:
            torch.testing.assert_close(now, parameter, rtol=0, atol=0)
        elif "prompt_encoder" in name:
            assert not torch.allclose(now, parameter), name


@pytest.mark.parametrize("peft_config", [prompt_tuning, p_tuning], ids=["prompt_tuning", "p_tuning"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["peft_config", "peft_model"])
def test_prompt_tuning_trains_as_stock_with_the_token_passes_aside(tmp_path, wrapped, peft_config):
    with pytest.warns(TurbotrainWarning, match="virtual tokens prepended to each row") as said:
        trainer, losses, before = run(tmp_path, True, wrapped, peft_config)
    refused = [str(w.message) for w in said if "virtual tokens" in str(w.message)]
    assert any("padding-free left" in m for m in refused) and any("label sparsity left" in m for m in refused)
    report = trainer.turbo_report
    assert {"padding_free", "label_sparsity"} <= set(report.skipped) and "padding_free" not in report.applied
    assert_only_the_prompt_encoder_trained(trainer, before)
    stock, stock_losses, _ = run(tmp_path, False, wrapped, peft_config)
    assert_losses_close(losses, stock_losses, rtol=1e-6)


def test_prefix_tuning_keeps_label_sparsity_and_trains_as_stock(tmp_path):
    # gradient checkpointing off: TRL 1.16's SFTTrainer with PEFT 0.21's prefix tuning fails with it, stock too
    trainer, losses, _ = run(tmp_path, True, peft_config=prefix_tuning, gradient_checkpointing=False)
    assert "label_sparsity" in trainer.turbo_report.applied and "padding_free" in trainer.turbo_report.skipped
    _, stock_losses, _ = run(tmp_path, False, peft_config=prefix_tuning, gradient_checkpointing=False)
    assert_losses_close(losses, stock_losses, rtol=1e-6)


def test_padding_free_s_check_returns_a_problem_for_a_prompt_tuning_model():
    # the reported raise, without the refusal in front: near-zero weights (TRL's tiny test model's near-uniform
    # outputs) let the loss check agree, and the per-token check met [B, 8 + L, V] logits for [B, L] tokens
    from peft import get_peft_model

    from turbotrain.passes.padding_free import AttentionSwitch, PaddingFree, packing_spec, self_check

    model = get_peft_model(decoder(), prompt_tuning())
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1e-3)
    switch, _ = AttentionSwitch.apply(model)  # packed attention, the mask mode padding-free tries first
    installed = PaddingFree(model, packing_spec(model, mask="sequences"), pools=False, attention=switch)
    problem = self_check(model, installed, "per_token")
    assert problem is not None and "do not line up" in problem, problem


def test_prompt_learning_is_read_from_the_active_peft_config():
    from peft import LoraConfig, get_peft_model

    assert modeling.prompt_learning(decoder()) is None
    lora = get_peft_model(decoder(), LoraConfig(r=4, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    assert modeling.prompt_learning(lora) is None
    prompt = modeling.prompt_learning(get_peft_model(decoder(), prompt_tuning()))
    assert prompt == modeling.PromptLearning("PROMPT_TUNING", VIRTUAL_TOKENS, in_cache=False)
    assert modeling.prompt_learning(get_peft_model(decoder(), prefix_tuning())).in_cache
