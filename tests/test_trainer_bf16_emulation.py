"""A bf16 CPU run: the emulation runs the step's matmuls (forward and backward) where it is on, is named in the
summary line and logged once with the speeds behind it; losses stay stock bf16's; off, nothing changes. Under
gradient checkpointing (TRL's default) the recomputation is emulated too: the step equals the emulated step
without checkpointing exactly, and stock autocast's with it within bf16's tolerance."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import TrainerCallback

from tests.tiny_models import make
from tests.trainer_helpers import stock_trainer, train_losses, turbo_trainer
from turbotrain.args import TurboOptions
from turbotrain.training import bf16_emulation
from turbotrain.training.run_summary import emulation_note

STEPS = dict(max_steps=3, bf16=True, use_cpu=True, padding_free=False)


@pytest.fixture
def counted(monkeypatch):
    """How many emulated matmuls (forward and backward) ran."""
    calls = {"forward": 0, "backward": 0}
    forward, backward = bf16_emulation.EmulatedMatmul.forward, bf16_emulation.EmulatedMatmul._backward

    def counting_forward(*args):
        calls["forward"] += 1
        return forward(*args)

    def counting_backward(*args):
        calls["backward"] += 1
        return backward(*args)

    monkeypatch.setattr(bf16_emulation.EmulatedMatmul, "forward", staticmethod(counting_forward))
    monkeypatch.setattr(bf16_emulation.EmulatedMatmul, "_backward", staticmethod(counting_backward))
    return calls


def test_emulation_on_runs_the_matmuls_and_keeps_stock_bf16_losses(tmp_path, counted, monkeypatch, caplog):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path / "cache"))
    stock = train_losses(
        stock_trainer("llama", tmp_path, model=make("llama", dropout=False), max_steps=3, bf16=True, use_cpu=True)
    )
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        trainer = turbo_trainer("llama", tmp_path, model=make("llama", dropout=False), bf16_emulation="on", **STEPS)
        losses = train_losses(trainer)
    assert trainer.turbo_bf16_emulation and counted["forward"] > 0 and counted["backward"] > 0
    assert "bf16 emulated in fp32 GEMMs" in trainer.turbo_summary()
    assert any("bf16_emulation='on'" in r.getMessage() for r in caplog.records)
    for turbo_loss, stock_loss in zip(losses, stock, strict=True):
        assert abs(turbo_loss - stock_loss) <= 5e-3 * abs(stock_loss)


def test_emulation_off_changes_nothing(tmp_path, counted, monkeypatch):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path / "cache"))
    trainer = turbo_trainer("llama", tmp_path, bf16_emulation="off", **STEPS)
    trainer.train()
    assert not trainer.turbo_bf16_emulation and counted == {"forward": 0, "backward": 0}
    assert "bf16 emulated" not in trainer.turbo_summary()


def test_fp32_run_never_emulates(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path / "cache"))
    trainer = turbo_trainer("llama", tmp_path, max_steps=1, bf16_emulation="on", padding_free=False)
    assert not trainer.turbo_bf16_emulation


def test_auto_where_the_cpu_has_units_is_off(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(bf16_emulation, "has_bf16_units", lambda flags=None: True)
    trainer = turbo_trainer("llama", tmp_path, **STEPS)
    assert not trainer.turbo_bf16_emulation


def test_summary_names_the_emulation():
    assert emulation_note(True, has_units=False) == "; bf16 emulated in fp32 GEMMs: this CPU has no bf16 units"
    assert emulation_note(False, has_units=False) == ""


def test_option_is_checked():
    with pytest.raises(ValueError, match="bf16_emulation must be one of"):
        TurboOptions(bf16_emulation="maybe").validate()


class FirstGradients(TrainerCallback):
    """Every parameter's gradient of the first optimizer step (before the optimizer; clipping off)."""

    def __init__(self):
        self.grads: dict[str, torch.Tensor] | None = None

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if self.grads is None:
            self.grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def first_step(trainer) -> tuple[float, dict[str, torch.Tensor]]:
    """(loss, every parameter's gradient) of the trainer's first step."""
    catcher = FirstGradients()
    trainer.add_callback(catcher)
    losses = train_losses(trainer)
    return losses[0], catcher.grads


ONE_STEP = dict(max_steps=1, bf16=True, use_cpu=True, max_grad_norm=0.0)
CHECKPOINTING = {
    "transformers/TRL default (non-reentrant)": None,
    "use_reentrant=True": {"use_reentrant": True},
    "use_reentrant=False": {"use_reentrant": False},
}


@pytest.mark.parametrize("kwargs", CHECKPOINTING.values(), ids=CHECKPOINTING.keys())
def test_emulation_under_gradient_checkpointing_is_exact(tmp_path, counted, monkeypatch, kwargs):
    """The recomputation is emulated as its forward was: the same loss and gradients, bit for bit, as the emulated
    step without checkpointing, and within bf16's tolerance of stock autocast's step with checkpointing."""
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path / "cache"))
    checkpointing = dict(gradient_checkpointing=True, gradient_checkpointing_kwargs=kwargs)
    stock_loss, stock_grads = first_step(
        stock_trainer("llama", tmp_path, model=make("llama", dropout=False), **ONE_STEP, **checkpointing)
    )
    turbo = dict(bf16_emulation="on", backend="eager", padding_free=False, **ONE_STEP)
    plain_loss, plain_grads = first_step(turbo_trainer("llama", tmp_path, model=make("llama", dropout=False), **turbo))
    forwards_without = counted["forward"]
    trainer = turbo_trainer("llama", tmp_path, model=make("llama", dropout=False), **turbo, **checkpointing)
    loss, grads = first_step(trainer)
    assert trainer.turbo_bf16_emulation and trainer.model.is_gradient_checkpointing
    assert counted["forward"] - forwards_without > forwards_without  # the layers' matmuls ran again, emulated
    assert loss == plain_loss and grads.keys() == plain_grads.keys() == stock_grads.keys()
    for name, grad in grads.items():
        assert torch.equal(grad, plain_grads[name]), name
        error = (grad.float() - stock_grads[name].float()).norm() / stock_grads[name].float().norm()
        assert error <= 2e-2, f"{name}: relative difference {error:.2e} from stock autocast"
    assert abs(loss - stock_loss) <= 5e-3 * abs(stock_loss)
