"""The names zero-edit mode swaps: Transformers' and TRL's classes -> turbotrain's, and back."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys
from types import SimpleNamespace

import pytest
from transformers import HfArgumentParser, Seq2SeqTrainer, Trainer, TrainingArguments

from turbotrain import TurboSeq2SeqTrainer, TurboSeq2SeqTrainingArguments, TurboTrainer, TurboTrainingArguments
from turbotrain.launch.patch import install
from turbotrain.trainer import TurboMixin


@pytest.fixture
def patched(request):
    patch = install(getattr(request, "param", None))
    yield patch
    patch.undo()


class _Current:
    """`transformers` as a script's `import transformers` gets it now (Transformers may re-make the module)."""

    def __getattr__(self, name):
        return getattr(sys.modules["transformers"], name)


transformers = _Current()


def test_a_plain_import_patches_nothing():
    code = (
        "import sys, turbotrain, turbotrain.launch, transformers; "
        "assert 'turbotrain.launch.patch' not in sys.modules; "
        "t = transformers.__dict__.get('Trainer'); assert t is None or t.__module__ == 'transformers.trainer'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_transformers_names_become_turbotrain_s_and_come_back(patched):
    assert transformers.Trainer is TurboTrainer and transformers.TrainingArguments is TurboTrainingArguments
    assert transformers.Seq2SeqTrainer is TurboSeq2SeqTrainer
    assert transformers.Seq2SeqTrainingArguments is TurboSeq2SeqTrainingArguments
    from transformers import Trainer as imported  # what a script's import gets (the lazy module's attribute)

    import_name = "transformers"
    assert importlib.import_module(import_name).Trainer is TurboTrainer

    assert imported is TurboTrainer and issubclass(imported, Trainer)
    assert importlib.import_module("transformers.trainer").Trainer is Trainer, (
        "the defining module keeps the stock class (pickle looks there)"
    )
    patched.undo()
    assert transformers.Trainer is Trainer and transformers.Seq2SeqTrainer is Seq2SeqTrainer


def test_a_script_s_subclass_is_a_turbotrain_trainer_and_still_a_trainer(patched):
    class MyTrainer(transformers.Trainer):
        pass

    assert issubclass(MyTrainer, TurboMixin) and issubclass(MyTrainer, Trainer)


@pytest.mark.requires_llm
def test_trl_names_become_turbotrain_s_and_trl_keeps_its_own_classes(patched):
    import trl
    import trl.trainer
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    from turbotrain import TurboSFTConfig, TurboSFTTrainer

    assert trl.SFTTrainer is TurboSFTTrainer and trl.trainer.SFTTrainer is TurboSFTTrainer
    assert trl.SFTConfig is TurboSFTConfig and issubclass(TurboSFTConfig, SFTConfig)
    assert Trainer in SFTTrainer.__mro__ and TurboMixin not in SFTTrainer.__mro__, "TRL was imported before the patch"
    assert "turbo_padding_free" in {f.name for f in __import__("dataclasses").fields(trl.SFTConfig)}
    assert issubclass(trl.DPOTrainer, TurboMixin) and issubclass(trl.DPOConfig, trl.trainer.dpo_config.DPOConfig)
    from turbotrain import TurboDPOTrainer, TurboGRPOTrainer, TurboRLOOConfig, TurboRLOOTrainer

    assert trl.DPOTrainer is TurboDPOTrainer and trl.trainer.GRPOTrainer is TurboGRPOTrainer
    assert trl.RLOOTrainer is TurboRLOOTrainer and trl.trainer.RLOOConfig is TurboRLOOConfig
    assert (
        issubclass(trl.GRPOConfig, trl.trainer.grpo_config.GRPOConfig)
        and "backend" in trl.GRPOConfig.__dataclass_fields__
    )


@pytest.mark.requires_llm
@pytest.mark.parametrize("patched", [{"backend": "eager"}], indirect=True)
def test_kto_names_become_turbotrain_s_with_the_run_defaults_and_come_back(patched, tmp_path):
    import trl
    import trl.trainer
    from trl.trainer.kto_config import KTOConfig
    from trl.trainer.kto_trainer import KTOTrainer

    from turbotrain import TurboKTOConfig, TurboKTOTrainer

    assert trl.KTOTrainer is TurboKTOTrainer and trl.trainer.KTOTrainer is TurboKTOTrainer
    assert issubclass(trl.KTOConfig, TurboKTOConfig) and issubclass(trl.trainer.KTOConfig, KTOConfig)
    assert importlib.import_module("trl.trainer.kto_trainer").KTOTrainer is KTOTrainer, "its module keeps TRL's"
    args = trl.KTOConfig(output_dir=str(tmp_path), desirable_weight=2.0, bf16=False)
    assert (args.backend, args.desirable_weight) == ("eager", 2.0)
    again = pickle.loads(pickle.dumps(args))
    assert type(again) is TurboKTOConfig and again.backend == "eager"
    patched.undo()
    assert trl.KTOTrainer is KTOTrainer and trl.KTOConfig is KTOConfig


def test_a_trl_pair_a_release_lacks_stays_stock_and_the_others_are_replaced(monkeypatch, caplog):
    from turbotrain.integrations import trl as trl_table
    from turbotrain.launch import patch as launch_patch

    monkeypatch.setattr(launch_patch, "is_trl_available", lambda: True)
    rows = [
        SimpleNamespace(modules={"Trainer": "transformers.trainer"}),
        SimpleNamespace(modules={"GoneTrainer": "no.such"}),
    ]
    monkeypatch.setattr(trl_table, "TRAINERS", rows)
    with caplog.at_level("WARNING", logger="turbotrain"):
        made = launch_patch._trl_classes({})
    assert made == {"Trainer": TurboTrainer} and "TRL's GoneTrainer stay stock: ModuleNotFoundError" in caplog.text


@pytest.mark.parametrize("patched", [{"backend": "eager", "padding_free": False}], indirect=True)
def test_run_options_are_the_defaults_and_what_the_script_sets_wins(patched, tmp_path):
    args = transformers.TrainingArguments(output_dir=str(tmp_path))
    assert (args.backend, args.padding_free, args.label_sparsity) == ("eager", False, True)
    assert transformers.TrainingArguments(output_dir=str(tmp_path), backend="auto").backend == "auto"
    parser = HfArgumentParser(transformers.TrainingArguments)
    (parsed,) = parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path), "--padding_free", "True"])
    assert (parsed.backend, parsed.padding_free) == ("eager", True)
    assert isinstance(parsed, TurboTrainingArguments) and isinstance(parsed, TrainingArguments)


@pytest.mark.parametrize("patched", [{"backend": "inductor"}], indirect=True)
def test_a_script_s_own_command_line_sets_backend_options_as_json(patched, tmp_path):
    parser = HfArgumentParser(transformers.TrainingArguments)
    command_line = ["--output_dir", str(tmp_path), "--backend_options", '{"scope": "blocks"}']
    (parsed,) = parser.parse_args_into_dataclasses(command_line)
    assert (parsed.backend, parsed.backend_options) == ("inductor", {"scope": "blocks"})


@pytest.mark.parametrize("patched", [{"backend": "eager", "backend_options": None}], indirect=True)
def test_arguments_with_run_defaults_pickle_as_their_turbotrain_class(patched, tmp_path):
    import torch

    args = transformers.TrainingArguments(output_dir=str(tmp_path))
    torch.save(args, tmp_path / "training_args.bin")  # what Trainer does at every checkpoint
    loaded = torch.load(tmp_path / "training_args.bin", weights_only=False)
    assert type(loaded) is TurboTrainingArguments and loaded.backend == "eager"
    assert type(pickle.loads(pickle.dumps(args))) is TurboTrainingArguments


@pytest.mark.requires_llm
@pytest.mark.parametrize("patched", [{"padding_free": False}], indirect=True)
def test_trl_config_with_run_defaults_keeps_trl_s_padding_free_and_pickles(patched, tmp_path):
    import trl

    from turbotrain import TurboSFTConfig

    config = trl.SFTConfig(output_dir=str(tmp_path), bf16=False)
    assert config.turbo_padding_free is False and config.padding_free is False  # turbotrain's option, TRL's own
    assert type(pickle.loads(pickle.dumps(config))) is TurboSFTConfig


@pytest.mark.requires_llm
@pytest.mark.parametrize("patched", [{"backend": "eager"}], indirect=True)
def test_sft_trainer_given_training_arguments_gets_a_turbo_sft_config(patched, tmp_path):
    # a script's `SFTTrainer(args=TrainingArguments(...))`: TRL rebuilds the arguments as an SFTConfig, which
    # failed on turbotrain's fields once `turbotrain run` had made them TurboTrainingArguments
    import trl

    from tests.llm.helpers import decoder, prompt_completion_rows, tokenizer
    from turbotrain import TurboSFTConfig

    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=1, report_to="none", use_cpu=True)
    trainer = trl.SFTTrainer(
        model=decoder(), args=args, train_dataset=prompt_completion_rows(), processing_class=tokenizer()
    )
    assert isinstance(trainer.args, TurboSFTConfig) and trainer.args.backend == "eager"
    assert (trainer.args.padding_free, trainer.args.turbo_padding_free) == (False, True)


@pytest.mark.requires_llm
@pytest.mark.parametrize("row", ["SFT", "DPO", "KTO", "GRPO", "RLOO"])
def test_every_row_of_trl_s_table_becomes_turbotrain_s(patched, row):
    """One per row of integrations/trl/'s table: `turbotrain run` replaces TRL's trainer and config by the ready names."""
    import trl

    import turbotrain
    from turbotrain.integrations.trl import TRAINERS

    assert [each.name for each in TRAINERS] == ["SFT", "DPO", "KTO", "GRPO", "RLOO"]
    trainer, config = getattr(trl, f"{row}Trainer"), getattr(trl, f"{row}Config")
    assert trainer is getattr(turbotrain, f"Turbo{row}Trainer") and issubclass(trainer, TurboMixin)
    assert issubclass(config, getattr(turbotrain, f"Turbo{row}Config"))
