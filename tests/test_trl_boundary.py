"""trl_boundary.py: TRL's trainers recognised by class (not by name), the private TRL attributes the
`num_tokens` correction writes and GRPO's generation method (the benchmark times it) pinned, and the trainer
path importing no TRL."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
from transformers import Trainer

from tests.llm.helpers import decoder, prompt_completion_rows, tokenizer
from tests.trainer_helpers import COMMON
from turbotrain.boundaries import trl_boundary as integration
from turbotrain.passes import fused_head_calls

pytestmark = pytest.mark.requires_llm


def test_sft_trainers_are_known_by_class_not_by_name():
    from trl import DPOTrainer, SFTTrainer

    class MySFT(SFTTrainer):
        pass

    class SFTTrainerLookalike(Trainer):  # the class-name match took this for TRL's
        pass

    SFTTrainerLookalike.__name__ = "SFTTrainer"
    assert integration.is_sft_trainer(SFTTrainer) and integration.is_sft_trainer(MySFT)
    assert not integration.is_sft_trainer(SFTTrainerLookalike) and not integration.is_sft_trainer(DPOTrainer)


def test_the_token_count_goes_before_sft_trainers_own_compute_loss_only():
    from trl import DPOTrainer, SFTTrainer

    class OwnLoss(SFTTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    assert integration.counts_tokens_from_mask(SFTTrainer)
    assert integration.counts_tokens_from_mask(type("Sub", (SFTTrainer,), {}))
    assert not integration.counts_tokens_from_mask(OwnLoss)
    assert not integration.counts_tokens_from_mask(DPOTrainer) and not integration.counts_tokens_from_mask(Trainer)


def test_trl_private_attributes_and_signatures_are_pinned(tmp_path):
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(output_dir=str(tmp_path), **{**COMMON, "max_steps": 1}, use_cpu=True)
    trainer = SFTTrainer(
        model=decoder(), args=args, train_dataset=prompt_completion_rows(8), processing_class=tokenizer()
    )
    for name in integration.TRL_PRIVATE_ATTRIBUTES:
        assert hasattr(trainer, name), name
    assert isinstance(trainer._total_train_tokens, int) and "num_tokens" not in trainer._metrics["train"]
    assert tuple(inspect.signature(SFTTrainer.compute_loss).parameters)[:3] == ("self", "model", "inputs")
    assert trainer.args.loss_type == "nll"
    fields = set(fused_head_calls.fused_output_class().__dataclass_fields__)
    assert {"loss", "log_probs", "entropy", "is_top1", "label_mask"} <= fields
    from trl.kernels import ChunkedLogProbFunction
    from trl.trainer import utils

    assert isinstance(getattr(utils, integration.TRL_HEAD_CHUNK), int)  # the tile TRL's own fused head passes
    parameters = tuple(inspect.signature(ChunkedLogProbFunction.forward).parameters)
    assert parameters[1:] == ("hidden", "weight", "bias", "targets", "temperature", "chunk_size",
                              "final_logit_softcapping", "logit_scale", "outputs")  # fmt: skip


def test_grpo_s_generation_method_is_pinned_and_timing_it_changes_nothing():
    from trl import GRPOTrainer

    generate = getattr(GRPOTrainer, integration.GRPO_GENERATION)
    assert tuple(inspect.signature(generate).parameters) == ("self", "prompts")
    output = ([[1, 2]], [[3, 4, 5]], "the rest")
    trainer = type("Run", (), {integration.GRPO_GENERATION: lambda self, prompts: output})()
    noted = []
    integration.note_grpo_generations(trainer, lambda *call: noted.append(call))
    assert getattr(trainer, integration.GRPO_GENERATION)(["a prompt"]) is output
    assert len(noted) == 1 and noted[0][0] >= 0 and noted[0][1:] == ([[1, 2]], [[3, 4, 5]])
    with pytest.raises(RuntimeError, match="no _generate"):
        integration.note_grpo_generations(object(), print)


def test_the_trainer_path_imports_no_trl():
    code = (
        "import sys\n"
        "from transformers import Trainer\n"
        "from turbotrain import TurboTrainer\n"
        "from turbotrain.boundaries import trl_boundary as trl\n"
        "assert not trl.is_sft_trainer(TurboTrainer) and not trl.counts_tokens_from_mask(Trainer)\n"
        "assert 'trl' not in sys.modules, 'trl was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
