"""Trainer features that turbotrain already keeps exact, pinned so they stay so (issue 36): gradient checkpointing
(reentrant and not) with every pass active, and `evaluate()` / `predict()` logits and metrics with
`prediction_loss_only=False` and `include_for_metrics`. Label smoothing: tests/test_trainer.py; TRL's trainers:
tests/llm/test_trl.py; DeepSpeed ZeRO under torchrun: tests/scale/test_data_parallel.py."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import Trainer, TrainingArguments

from tests.tiny_models import make
from tests.trainer_helpers import (
    COMMON,
    RightPaddingCollator,
    assert_losses_close,
    train_losses,
    variable_length_dataset,
)
from turbotrain import TurboTrainer, TurboTrainingArguments


def trainer(trainer_class, args_class, tmp_path, family="gpt2", task="lm", **overrides):
    model = make(family, task=task, dropout=False)  # no dropout: padding-free packs, every pass is on
    args = args_class(output_dir=str(tmp_path / trainer_class.__name__), **{**COMMON, "max_steps": 4, **overrides})
    return trainer_class(
        model=model,
        args=args,
        train_dataset=variable_length_dataset(task=task),
        eval_dataset=variable_length_dataset(n=12, task=task, seed=1),
        data_collator=RightPaddingCollator(model.config.pad_token_id or 0),
    )


@pytest.mark.parametrize("reentrant", [True, False])
def test_gradient_checkpointing_with_every_pass_matches_stock(tmp_path, reentrant):
    checkpointing = dict(gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    stock = train_losses(trainer(Trainer, TrainingArguments, tmp_path, **checkpointing))
    turbo = trainer(TurboTrainer, TurboTrainingArguments, tmp_path, **checkpointing)
    losses = train_losses(turbo)
    assert {"padding_free", "label_sparsity", "embedding_grad"} <= set(turbo.turbo_report.applied)
    assert turbo.model.is_gradient_checkpointing
    assert_losses_close(losses, stock, rtol=1e-5)


def metrics_of(prediction) -> dict:
    """What compute_metrics can read with include_for_metrics: predictions, labels, inputs and losses."""
    logits, labels = prediction.predictions, prediction.label_ids
    kept = labels != -100
    return {
        "accuracy": float((logits.argmax(-1)[kept] == labels[kept]).mean()),
        "inputs": float(prediction.inputs.sum()),
        "losses": float(np.asarray(prediction.losses).sum()),
    }


@pytest.mark.parametrize("family,task", [("gpt2", "lm"), ("bert", "cls")])
def test_evaluate_and_predict_give_stocks_logits_and_metrics(tmp_path, family, task):
    options = dict(prediction_loss_only=False, include_for_metrics=["inputs", "loss"], per_device_eval_batch_size=5)
    results = []
    for trainer_class, args_class in ((TurboTrainer, TurboTrainingArguments), (Trainer, TrainingArguments)):
        made = trainer(trainer_class, args_class, tmp_path, family=family, task=task, **options)
        made.compute_metrics = metrics_of if task == "lm" else None
        made.train()
        prediction = made.predict(made.eval_dataset)
        results.append((made.evaluate(), prediction))
    (turbo_eval, turbo_predict), (stock_eval, stock_predict) = results
    np.testing.assert_allclose(turbo_predict.predictions, stock_predict.predictions, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(turbo_predict.label_ids, stock_predict.label_ids)
    assert set(turbo_eval) == set(stock_eval) and set(turbo_predict.metrics) == set(stock_predict.metrics)
    for name, value in stock_eval.items():
        if "runtime" not in name and "per_second" not in name:
            assert turbo_eval[name] == pytest.approx(value, rel=1e-5), name
