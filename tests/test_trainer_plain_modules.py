"""Models stock Trainer trains that are not Transformers language models: every pass and backend steps aside
for what it cannot use and says so in the summary, never raises, and the losses stay stock's (issue 36).

The kinds: a plain `nn.Module` without `.config`, one whose `config` is None (Transformers' own test models
set that), a `PreTrainedModel` with a config but no embedding table, and a model returning only a loss.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel, Trainer, TrainingArguments

from tests.trainer_helpers import assert_losses_close, train_losses
from turbotrain import TurboTrainer, TurboTrainingArguments


class Regression:
    def __init__(self, n: int = 16):
        x = np.random.default_rng(0).normal(size=n).astype(np.float32)
        self.x, self.y = x, (2 * x + 3).astype(np.float32)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_x": self.x[i], "labels": self.y[i]}


class NoConfig(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Parameter(torch.tensor(0.5)), nn.Parameter(torch.tensor(0.0))

    def forward(self, input_x, labels=None, **kwargs):
        y = input_x * self.a + self.b
        return (nn.functional.mse_loss(y, labels), y) if labels is not None else (y,)


class NoneConfig(NoConfig):
    def __init__(self):
        super().__init__()
        self.config = None


class OnlyLoss(NoConfig):
    def forward(self, input_x, labels=None, **kwargs):
        return {"loss": nn.functional.mse_loss(input_x * self.a + self.b, labels)}


class TinyConfig(PretrainedConfig):
    model_type = "turbotrain-regression"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = 1


class Pretrained(PreTrainedModel):
    config_class = TinyConfig

    def __init__(self, config):
        super().__init__(config)
        self.a, self.b = nn.Parameter(torch.tensor(0.5)), nn.Parameter(torch.tensor(0.0))

    def forward(self, input_x, labels=None, **kwargs):
        y = input_x * self.a + self.b
        return (nn.functional.mse_loss(y, labels), y) if labels is not None else (y,)


MODELS = {
    "no config": NoConfig,
    "config None": NoneConfig,
    "only a loss": OnlyLoss,
    "pretrained, no embeddings": lambda: Pretrained(TinyConfig()),
}
COMMON = dict(
    max_steps=3,
    logging_steps=1,
    disable_tqdm=True,
    per_device_train_batch_size=4,
    learning_rate=0.1,
    report_to=[],
    seed=0,
)


@pytest.mark.parametrize("backend", ["auto", "eager"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_a_model_without_config_or_embeddings_trains_as_stock(kind, backend, tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(0)
    stock = Trainer(
        MODELS[kind](), TrainingArguments(output_dir=str(tmp_path / "s"), **COMMON), train_dataset=Regression()
    )
    torch.manual_seed(0)
    arguments = TurboTrainingArguments(output_dir=str(tmp_path / "t"), backend=backend, padding_free=True, **COMMON)
    turbo = TurboTrainer(MODELS[kind](), arguments, train_dataset=Regression())
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        assert_losses_close(train_losses(turbo), train_losses(stock), rtol=1e-6)
    summary = turbo.turbo_summary()
    assert "padding_free (does not apply" in summary and "embedding_grad (does not apply" in summary
    assert any(r.getMessage() == summary for r in caplog.records)
