"""`TurboTrainer` on models without token-id inputs (speech CTC and classification, image classification,
semantic segmentation, image-text contrastive): it builds where stock `Trainer` does, trains the same
3 steps (losses within 1e-5 relative), and its summary says which passes do not apply.

Issue 27: each of these crashed at construction with `NotImplementedError: get_input_embeddings not
auto-handled` (asked by the embedding-gradient pass), as did `turbotrain.optimize(model)`.
"""

from __future__ import annotations

import logging

import pytest
from transformers import Trainer, TrainingArguments

from tests.tiny_non_text import MODELS, PadCollator, examples, make
from tests.trainer_helpers import COMMON, assert_losses_close, train_losses
from turbotrain import TurboTrainer, TurboTrainingArguments, optimize
from turbotrain.utils.warnings import TurbotrainWarning

ARGS = dict(COMMON, max_steps=3, remove_unused_columns=False)


def trainer(trainer_class, args_class, name: str, output_dir) -> Trainer:
    args = args_class(output_dir=str(output_dir), **ARGS)
    return trainer_class(model=make(name), args=args, train_dataset=examples(name), data_collator=PadCollator())


@pytest.mark.parametrize("name", list(MODELS))
def test_turbo_trains_like_stock(name, tmp_path):
    stock = train_losses(trainer(Trainer, TrainingArguments, name, tmp_path / "stock"))
    fast = trainer(TurboTrainer, TurboTrainingArguments, name, tmp_path / "turbo")
    assert_losses_close(train_losses(fast), stock, rtol=1e-5)


@pytest.mark.parametrize("name", list(MODELS))
def test_optimize_says_what_does_not_apply_without_warning(name, recwarn, caplog):
    with caplog.at_level(logging.INFO, logger="turbotrain"):
        report = optimize(make(name))
    assert report.embedding_grad is None and report.label_sparsity is None and report.padding_free is None
    assert not [w for w in recwarn if issubclass(w.category, TurbotrainWarning)]  # nothing was refused
    assert "padding_free" in report.not_applicable
    assert any("does not apply" in record.getMessage() for record in caplog.records)


def test_the_summary_names_what_applied_and_what_does_not_apply(tmp_path):
    fast = trainer(TurboTrainer, TurboTrainingArguments, "wav2vec2-ctc", tmp_path)
    line = fast.turbo_summary()
    assert "passes: none" in line
    assert "padding_free (does not apply: Wav2Vec2ForCTC" in line, line
