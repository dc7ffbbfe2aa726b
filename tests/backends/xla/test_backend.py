"""The xla backend's options, what it turns off, what it refuses, and the error without the extra."""

from __future__ import annotations

import pytest

from tests.tiny_models import make
from tests.trainer_helpers import dataset
from turbotrain import TurboTrainer, TurboTrainingArguments
from turbotrain.backends import BackendUnavailable, get_backend
from turbotrain.backends.xla.options import XlaOptions


def xla_trainer(tmp_path, trainer_class=TurboTrainer, **overrides):
    args = TurboTrainingArguments(output_dir=str(tmp_path), backend="xla", report_to="none", max_steps=1, **overrides)
    return trainer_class(model=make("gpt2", dropout=False), args=args, train_dataset=dataset(n=8))


def test_options_are_validated():
    assert XlaOptions.from_dict({"length_buckets": [64, 32]}).length_buckets == (32, 64)
    with pytest.raises(ValueError, match="unknown backend_options"):
        XlaOptions.from_dict({"num_device": 2})
    with pytest.raises(ValueError, match="matmul_precision"):
        XlaOptions.from_dict({"matmul_precision": "bf16"})


def test_missing_packages_name_the_extra(monkeypatch, tmp_path):
    monkeypatch.setattr("turbotrain.backends.xla.is_available", lambda package: package != "torchax")
    with pytest.raises(BackendUnavailable, match=r"torchax.*turbotrain\[xla\]"):
        get_backend("xla").check_available(TurboTrainingArguments(output_dir=str(tmp_path)))


@pytest.mark.requires_xla
def test_shape_changing_and_autograd_passes_are_turned_off(tmp_path):
    trainer = xla_trainer(tmp_path)
    assert not trainer.turbo_options.padding_free and not trainer.turbo_options.embedding_grad
    assert trainer.args.padding_free and trainer.args.embedding_grad  # the user's arguments are left as given
    assert trainer.turbo_report.label_sparsity is not None


class OwnLoss(TurboTrainer):
    def compute_loss(self, model, inputs, **kwargs):
        return super().compute_loss(model, inputs, **kwargs)


@pytest.mark.requires_xla
@pytest.mark.parametrize(
    ("overrides", "trainer_class", "message"),
    [
        ({"optim": "sgd"}, TurboTrainer, "optim"),
        ({"fp16": True, "use_cpu": True}, TurboTrainer, "fp16"),
        ({"label_smoothing_factor": 0.1}, TurboTrainer, "label smoothing"),
        ({"auto_find_batch_size": True}, TurboTrainer, "auto_find_batch_size"),
        ({}, OwnLoss, "compute_loss"),
    ],
)
def test_what_the_compiled_step_would_bypass_is_refused(tmp_path, overrides, trainer_class, message):
    from turbotrain.backends.xla.loop import check_trainer

    trainer = xla_trainer(tmp_path, trainer_class, **overrides)
    with pytest.raises(ValueError, match=message):
        check_trainer(trainer)
