"""Self-checks under the run's precision (passes/self_check.py `check_under_run_precision`): autocast as the
run computes, a backward, NaN/inf gradients refused, `.grad` left as it was, and TurboTrainer's bf16 runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.tiny_models import batch, make
from turbotrain import optimize
from turbotrain.passes import self_check
from turbotrain.passes.self_check import RunPrecision, check_under_run_precision, compare_losses, run_precision
from turbotrain.utils.warnings import TurbotrainWarning


class NaNGradient(torch.autograd.Function):
    """Identity forward, NaN backward: a rewrite whose loss is right and whose gradients are not."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return torch.full_like(grad, float("nan"))


def nan_gradient_rewrite(model, inputs):
    layer = model.get_output_embeddings()

    def rewritten():
        handle = layer.register_forward_pre_hook(lambda m, args: (NaNGradient.apply(args[0]),))
        try:
            return model(**inputs)
        finally:
            handle.remove()

    return rewritten


def test_nan_gradients_with_the_right_loss_are_refused():
    model = make("gpt2", dropout=False)
    inputs = batch(2, 9, keep=1.0)
    rewritten = nan_gradient_rewrite(model, inputs)
    assert compare_losses(model, lambda: model(**inputs), rewritten, "broken") is None  # the loss alone passes
    problem = check_under_run_precision(model, lambda: model(**inputs), rewritten, "broken")
    assert problem is not None and "NaN or inf gradients" in problem


def test_a_wrong_loss_is_refused_and_a_right_one_passes():
    model = make("roberta", dropout=False)
    inputs = batch(2, 9, keep=0.5)
    assert check_under_run_precision(model, lambda: model(**inputs), lambda: model(**inputs), "same") is None
    other = batch(2, 9, keep=0.5, seed=3)
    assert "differs from stock" in check_under_run_precision(
        model, lambda: model(**inputs), lambda: model(**other), "x"
    )


def test_gradients_and_mode_are_put_back():
    model = make("llama", dropout=False)
    model.train()
    inputs = batch(2, 9, keep=1.0)
    model(**inputs).loss.backward()
    before = {n: p.grad.clone() for n, p in model.named_parameters()}
    assert check_under_run_precision(model, lambda: model(**inputs), lambda: model(**inputs), "same") is None
    assert model.training
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(parameter.grad, before[name], rtol=0, atol=0)


def test_the_check_runs_under_the_runs_autocast():
    model = make("gpt2", dropout=False)
    inputs = batch(2, 9, keep=1.0)
    seen = []

    def record(module, args):
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)

    model.register_forward_pre_hook(record)
    with run_precision(RunPrecision("cpu", torch.bfloat16)):
        assert check_under_run_precision(model, lambda: model(**inputs), lambda: model(**inputs), "same") is None
    assert seen == [torch.bfloat16, torch.bfloat16]
    seen.clear()
    check_under_run_precision(model, lambda: model(**inputs), lambda: model(**inputs), "same")  # no run given: off
    assert seen == [None, None]


def test_precision_of_trainer_arguments():
    assert RunPrecision.of_arguments(SimpleNamespace(device=torch.device("cuda", 0), bf16=True, fp16=False)) == (
        RunPrecision("cuda", torch.bfloat16)
    )
    assert (
        RunPrecision.of_arguments(SimpleNamespace(device=torch.device("cpu"), bf16=False, fp16=True)).autocast_dtype
        is torch.float16
    )
    assert (
        RunPrecision.of_arguments(SimpleNamespace(device=torch.device("cpu"), bf16=False, fp16=False)).autocast_dtype
        is None
    )


@pytest.mark.parametrize("family", ["roberta", "llama"])
def test_passes_install_under_bf16_autocast(family):
    model = make(family, dropout=False)
    with run_precision(RunPrecision("cpu", torch.bfloat16)):
        report = optimize(model, padding_free=False, chunked_cross_entropy="always")
    assert report.label_sparsity is not None and report.chunked_cross_entropy is not None


def test_trainer_runs_the_checks_under_its_bf16_autocast(tmp_path, monkeypatch):
    from turbotrain import TurboTrainer, TurboTrainingArguments

    seen = []
    real = self_check.check_under_run_precision

    def recording(model, *args):
        seen.append(self_check.current_precision(model))
        return real(model, *args)

    monkeypatch.setattr(self_check, "check_under_run_precision", recording)  # check_forced calls it
    args = TurboTrainingArguments(output_dir=str(tmp_path), bf16=True, use_cpu=True, report_to="none", backend="eager")
    with pytest.warns(TurbotrainWarning):
        TurboTrainer(model=make("gpt2"), args=args)
    assert seen and set(seen) == {RunPrecision("cpu", torch.bfloat16)}  # every check that runs through it
