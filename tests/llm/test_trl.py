"""TRL's SFTTrainer with turbotrain (`turbo(SFTTrainer)`, `turbo_arguments(SFTConfig)`): 10 steps give stock
SFTTrainer's losses and metrics; where turbotrain cannot compose with TRL's fused head it steps aside."""

from __future__ import annotations

import pytest

from tests.llm.helpers import decoder, lora_config, prompt_completion_rows, tokenizer
from tests.trainer_helpers import COMMON, assert_losses_close
from turbotrain import optimize, turbo, turbo_arguments

pytestmark = pytest.mark.requires_llm
METRICS = ("loss", "entropy", "mean_token_accuracy", "num_tokens")


def sft_history(tmp_path, with_turbo: bool, steps: int = 10, peft: bool = False, **config):
    from trl import SFTConfig, SFTTrainer

    trainer_class = turbo(SFTTrainer) if with_turbo else SFTTrainer
    config_class = turbo_arguments(SFTConfig) if with_turbo else SFTConfig
    # fp32, where the passes are exact to 1e-4: TRL's default bf16 on a CPU without bf16 units is emulated by
    # turbotrain (bf16_emulation.py, its own tests), one bf16 ulp per op from stock autocast
    config = {"bf16": False, **config}
    args = config_class(
        output_dir=str(tmp_path / str(with_turbo)), **{**COMMON, "max_steps": steps}, use_cpu=True, **config
    )
    trainer = trainer_class(
        model=decoder(),
        args=args,
        train_dataset=prompt_completion_rows(),
        processing_class=tokenizer(),
        peft_config=lora_config() if peft else None,
    )
    trainer.train()
    return trainer, [entry for entry in trainer.state.log_history if "loss" in entry]


@pytest.fixture(scope="module")
def stock_default_logs(tmp_path_factory):
    """Stock SFTTrainer's 10 logged steps at the default settings, trained once for the tests that compare to it."""
    return sft_history(tmp_path_factory.mktemp("stock-sft"), False)[1]


def assert_same_history(turbo_logs, stock_logs):
    for metric in METRICS:
        assert_losses_close([e[metric] for e in turbo_logs], [e[metric] for e in stock_logs], rtol=1e-4)


@pytest.mark.parametrize("completion_only_loss", [True, False])
def test_sft_golden_losses_and_metrics(tmp_path, completion_only_loss):
    trainer, turbo_logs = sft_history(tmp_path, True, completion_only_loss=completion_only_loss)
    applied = trainer.turbo_report.applied
    assert {"label_sparsity", "chunked_cross_entropy", "padding_free"} <= set(applied), applied
    assert trainer.turbo_report.chunked_cross_entropy.compose_fused_calls
    _, stock_logs = sft_history(tmp_path, False, completion_only_loss=completion_only_loss)
    assert_same_history(turbo_logs, stock_logs)


def test_sft_with_peft_config_golden_losses(tmp_path):
    trainer, turbo_logs = sft_history(tmp_path, True, steps=4, peft=True)
    assert "label_sparsity" in trainer.turbo_report.applied and "Peft" in trainer.turbo_report.model_name
    _, stock_logs = sft_history(tmp_path, False, steps=4, peft=True)
    assert_same_history(turbo_logs, stock_logs)


def test_dft_loss_steps_aside_with_the_stock_numbers(tmp_path, caplog):
    with caplog.at_level("INFO", logger="turbotrain"):
        _, turbo_logs = sft_history(tmp_path, True, steps=2, loss_type="dft")
    assert "TRL's fused LM head runs as TRL wrote it" in caplog.text
    _, stock_logs = sft_history(tmp_path, False, steps=2, loss_type="dft")
    assert_same_history(turbo_logs, stock_logs)


def test_sft_config_keeps_trl_padding_free_and_carries_turbotrain_s(tmp_path):
    from trl import SFTConfig

    args = turbo_arguments(SFTConfig)(output_dir=str(tmp_path), turbo_padding_free=False, use_cpu=True)
    assert args.padding_free is False and args.turbo_padding_free is False
    assert turbo_arguments(SFTConfig)(output_dir=str(tmp_path), use_cpu=True).turbo_padding_free is True


def test_optimized_model_in_stock_sft_trainer_does_not_crash(tmp_path):
    from trl import SFTConfig, SFTTrainer

    model = decoder()
    optimize(model)
    args = SFTConfig(output_dir=str(tmp_path), **{**COMMON, "max_steps": 2}, use_cpu=True)
    SFTTrainer(model=model, args=args, train_dataset=prompt_completion_rows(), processing_class=tokenizer()).train()


@pytest.mark.parametrize("trl_option", [{"padding_free": True, "max_length": None}, {"packing": True}])
def test_trl_own_padding_free_and_packing_compose(tmp_path, trl_option):
    trainer, turbo_logs = sft_history(tmp_path, True, steps=3, **trl_option)
    assert "chunked_cross_entropy" in trainer.turbo_report.applied
    _, stock_logs = sft_history(tmp_path, False, steps=3, **trl_option)
    assert_same_history(turbo_logs, stock_logs)


def test_sft_script_pattern_ready_names_save_checkpoints_and_the_stock_losses(tmp_path, stock_default_logs):
    # TRL's sft.py with the names swapped (TurboSFTConfig, TurboSFTTrainer) and a checkpoint save: the save of
    # training_args.bin crashed (the made config class could not be pickled by name).
    from turbotrain import TurboSFTConfig, TurboSFTTrainer

    args = TurboSFTConfig(
        output_dir=str(tmp_path / "turbo"),
        **{**COMMON, "save_strategy": "steps", "save_steps": 5},
        use_cpu=True,
        bf16=False,
    )
    trainer = TurboSFTTrainer(
        model=decoder(), args=args, train_dataset=prompt_completion_rows(), processing_class=tokenizer()
    )
    trainer.train()
    trainer.save_model(args.output_dir)
    assert (tmp_path / "turbo" / "checkpoint-10" / "training_args.bin").exists()
    turbo_logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert_same_history(turbo_logs, stock_default_logs)


@pytest.mark.parametrize("positional", [False, True])
def test_turbo_training_arguments_in_turbo_sft_trainer_become_a_turbo_sft_config(
    tmp_path, positional, stock_default_logs
):
    # SFTTrainer rebuilds other arguments as SFTConfig(**args.to_dict()): that raised on turbotrain's options
    # (`backend` is no SFTConfig field), and turbotrain's padding_free would have become TRL's.
    from trl import SFTConfig

    from turbotrain import TurboSFTTrainer, TurboTrainingArguments

    args = TurboTrainingArguments(
        output_dir=str(tmp_path / "turbo"), **COMMON, use_cpu=True, backend="eager", fused_activation=False
    )
    model, rest = decoder(), dict(train_dataset=prompt_completion_rows(), processing_class=tokenizer())
    trainer = TurboSFTTrainer(model, args, **rest) if positional else TurboSFTTrainer(model=model, args=args, **rest)
    assert isinstance(trainer.args, SFTConfig) and type(trainer.args).__name__ == "TurboSFTConfig"
    assert (trainer.args.padding_free, trainer.args.turbo_padding_free) == (False, True), "TRL's stays TRL's"
    assert (trainer.args.backend, trainer.args.fused_activation, trainer.args.learning_rate) == ("eager", False, 1e-3)
    trainer.train()
    assert {"label_sparsity", "padding_free"} <= set(trainer.turbo_report.applied)
    turbo_logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert_same_history(turbo_logs, stock_default_logs)
