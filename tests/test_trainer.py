"""TurboTrainer is a drop-in Trainer: same losses (golden), and Trainer's features keep working."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForMaskedLM

from tests.tiny_models import make
from tests.trainer_helpers import (
    COMMON,
    StepRecorder,
    assert_losses_close,
    dataset,
    stock_trainer,
    train_losses,
    turbo_trainer,
)
from turbotrain import TurboTrainer, TurboTrainingArguments
from turbotrain.utils.warnings import TurbotrainWarning


@pytest.mark.parametrize("family", ["roberta", "gpt2"])
def test_golden_losses_ten_steps_match_stock_trainer(family, tmp_path):
    stock = train_losses(stock_trainer(family, tmp_path))
    turbo = turbo_trainer(family, tmp_path)
    assert "label_sparsity" in turbo.turbo_report.applied
    assert_losses_close(train_losses(turbo), stock)
    assert len(set(stock)) == len(stock)  # weights change every step, so a frozen model could not pass


def test_gradient_accumulation_matches_stock(tmp_path):
    kw = dict(gradient_accumulation_steps=2, max_steps=5)
    assert_losses_close(
        train_losses(turbo_trainer("gpt2", tmp_path, **kw)), train_losses(stock_trainer("gpt2", tmp_path, **kw))
    )


def test_bf16_autocast_matches_stock_loosely(tmp_path):
    kw = dict(bf16=True, use_cpu=not torch.cuda.is_available(), max_steps=4)
    assert_losses_close(
        train_losses(turbo_trainer("roberta", tmp_path, **kw)),
        train_losses(stock_trainer("roberta", tmp_path, **kw)),
        rtol=2e-2,
    )


def test_label_smoothing_turns_sparsity_off_with_a_warning(tmp_path):
    kw = dict(label_smoothing_factor=0.1, max_steps=3)
    with pytest.warns(TurbotrainWarning, match="label smoothing"):
        turbo = turbo_trainer("roberta", tmp_path, **kw)
    assert turbo.turbo_report.label_sparsity is None
    assert_losses_close(train_losses(turbo), train_losses(stock_trainer("roberta", tmp_path, **kw)))


def test_label_smoothing_that_trainer_turned_off_leaves_sparsity_on(tmp_path):
    # Trainer drops smoothing for multi-label models (one UserWarning, its own); sparsity then has nothing to refuse
    # (Transformers' TrainerLabelSmoothingTest counts the warnings)
    def model():
        model = make("roberta")
        model.config.problem_type = "multi_label_classification"
        return model

    kw = dict(label_smoothing_factor=0.1, max_steps=3)
    with pytest.warns(UserWarning) as caught:
        turbo = turbo_trainer("roberta", tmp_path, model=model(), **kw)
    assert [str(w.message).split(".")[0] for w in caught if "smoothing" in str(w.message)] == [
        "Label smoothing is not compatible with multi-label classification"
    ]
    assert turbo.label_smoother is None and "label_sparsity" in turbo.turbo_report.applied
    assert_losses_close(train_losses(turbo), train_losses(stock_trainer("roberta", tmp_path, model=model(), **kw)))


def test_evaluate_gives_full_logits_to_compute_metrics(tmp_path):
    seen = {}

    def compute_metrics(prediction):
        seen["shape"] = prediction.predictions.shape
        return {"n": float(prediction.predictions.shape[0])}

    trainer = turbo_trainer("roberta", tmp_path, max_steps=2)
    trainer.compute_metrics = compute_metrics
    trainer.train()
    metrics = trainer.evaluate(eval_dataset=dataset(n=6))
    assert seen["shape"][:2] == (6, 37) and seen["shape"][2] == trainer.model.config.vocab_size
    assert metrics["eval_n"] == 6.0 and "eval_loss" in metrics


def test_callbacks_see_every_step(tmp_path):
    recorder = StepRecorder()
    trainer = turbo_trainer("gpt2", tmp_path, max_steps=4)
    trainer.add_callback(recorder)
    trainer.train()
    assert recorder.steps == [1, 2, 3, 4]


def test_resume_from_checkpoint_continues_the_same_losses(tmp_path):
    kw = dict(max_steps=6, save_strategy="steps", save_steps=3)
    uninterrupted = train_losses(turbo_trainer("roberta", tmp_path / "a", **kw))
    first = turbo_trainer("roberta", tmp_path / "b", **kw)
    first.train()
    resumed = turbo_trainer("roberta", tmp_path / "b", **kw)
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "turbo" / "checkpoint-3"))
    after = [e["loss"] for e in resumed.state.log_history if "loss" in e and e["step"] > 3]
    assert_losses_close(after, uninterrupted[3:], rtol=1e-5)


def test_saved_model_loads_in_stock_transformers_with_same_logits(tmp_path):
    trainer = turbo_trainer("roberta", tmp_path, max_steps=2)
    trainer.train()
    trainer.save_model(str(tmp_path / "saved"))
    reloaded = AutoModelForMaskedLM.from_pretrained(str(tmp_path / "saved")).eval()
    model = trainer.model.eval()
    ids = torch.randint(3, 90, (2, 11))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, model(input_ids=ids).logits)
    assert (tmp_path / "saved" / "model.safetensors").exists()


@pytest.mark.requires_hpo
def test_hyperparameter_search_with_model_init(tmp_path):
    """3 optuna trials complete, the best one is reported, and every trial trains a freshly initialised
    model (with the passes) from the same initial weights."""
    models, initial = [], []

    def model_init(trial=None):
        models.append(make("roberta"))
        initial.append(models[-1].lm_head.dense.weight.detach().clone())
        return models[-1]

    args = TurboTrainingArguments(output_dir=str(tmp_path), **{**COMMON, "max_steps": 2})
    trainer = TurboTrainer(args=args, model_init=model_init, train_dataset=dataset(), eval_dataset=dataset(n=8))
    best = trainer.hyperparameter_search(
        hp_space=lambda trial: {"learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True)},
        backend="optuna",
        n_trials=3,
        direction="minimize",
    )
    assert 1e-4 <= best.hyperparameters["learning_rate"] <= 1e-2 and best.objective > 0
    assert len({id(m) for m in models}) == len(models) == 4  # one at init, one per trial
    assert all("label_sparsity" in m._turbotrain_report.applied for m in models)
    assert all(torch.equal(w, initial[0]) for w in initial)  # re-initialised, not carried over
    trained = [m.lm_head.dense.weight.detach() for m in models[1:]]
    assert not any(torch.equal(w, initial[0]) for w in trained)  # and each trial did train its own


def test_optimize_gives_a_plain_trainer_the_same_losses_and_the_sparse_head(tmp_path):
    from turbotrain import optimize
    from turbotrain.passes.label_sparsity import find_head

    model = make("roberta")
    report = optimize(model)
    rows_seen = []
    find_head(model).module.register_forward_hook(lambda m, a, out: rows_seen.append(out.shape[0]))
    plain = train_losses(stock_trainer("roberta", tmp_path / "plain", model=model, max_steps=4))
    stock = train_losses(stock_trainer("roberta", tmp_path / "stock", max_steps=4))
    assert "label_sparsity" in report.applied
    assert_losses_close(plain, stock)
    assert rows_seen and all(n < 4 * 37 for n in rows_seen)  # the head saw kept rows, not batch x length


def test_the_fused_adamw_is_used_and_the_arguments_keep_their_optim(tmp_path):
    trainer = turbo_trainer("roberta", tmp_path, optim="adamw_torch", max_steps=1)
    optimizer = trainer.create_optimizer()
    assert trainer.args.optim == "adamw_torch" and trainer.turbo_optim == "adamw_torch_fused"
    assert optimizer.defaults["fused"] is True and "optim adamw_torch_fused" in trainer.turbo_summary()
