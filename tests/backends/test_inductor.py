"""backend='inductor' trains with the same losses as eager stock Trainer, label sparsity included."""

from __future__ import annotations

import pytest
import torch

from tests.trainer_helpers import assert_losses_close, stock_trainer, train_losses, turbo_trainer


@pytest.mark.requires_compiler
def test_inductor_golden_losses_match_stock(tmp_path):
    kw = dict(max_steps=4)
    turbo = turbo_trainer("roberta", tmp_path, backend="inductor", **kw)
    assert turbo.backend.name == "inductor" and turbo.model._compiled_call_impl is not None
    assert_losses_close(train_losses(turbo), train_losses(stock_trainer("roberta", tmp_path, **kw)), rtol=1e-5)


@pytest.mark.requires_compiler
def test_inductor_with_packing_stops_recompiling_and_matches_stock(tmp_path, monkeypatch):
    """Packed shapes change every step; after Dynamo marks them dynamic, no step compiles again."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from tests.tiny_models import make
    from tests.trainer_helpers import COMMON, RightPaddingCollator, variable_length_dataset
    from turbotrain import TurboTrainer, TurboTrainingArguments
    from turbotrain.backends import inductor

    compiles = []
    original = inductor.exact_inductor
    monkeypatch.setattr(inductor, "exact_inductor", lambda gm, inputs: compiles.append(1) or original(gm, inputs))

    class CompileCount(TrainerCallback):
        def __init__(self):
            self.after_step = []

        def on_step_end(self, args, state, control, **kwargs):
            self.after_step.append(len(compiles))

    def build(trainer_class, args_class, **extra):
        model = make("roberta", dropout=False)
        args = args_class(output_dir=str(tmp_path / trainer_class.__name__), **{**COMMON, "max_steps": 8}, **extra)
        return trainer_class(
            model=model, args=args, train_dataset=variable_length_dataset(), data_collator=RightPaddingCollator(1)
        )

    counter = CompileCount()
    turbo = build(TurboTrainer, TurboTrainingArguments, backend="inductor")
    turbo.add_callback(counter)
    turbo_losses = train_losses(turbo)
    assert counter.after_step[3] == counter.after_step[-1], f"compiles per step: {counter.after_step}"
    assert_losses_close(turbo_losses, train_losses(build(Trainer, TrainingArguments)), rtol=1e-4)


def test_inductor_on_cuda_without_triton_is_refused_before_any_step(monkeypatch):
    """Without Triton, Inductor's first CUDA compile raises mid-run ("Cannot find a working triton installation")."""
    from types import SimpleNamespace

    from turbotrain.backends import BackendUnavailable
    from turbotrain.backends.inductor import InductorBackend
    from turbotrain.boundaries import torch_boundary

    args = SimpleNamespace(device=torch.device("cuda", 0), torch_compile=False, torch_compile_backend=None)
    monkeypatch.setattr(torch_boundary, "has_triton", lambda: False)
    with pytest.raises(BackendUnavailable, match="needs Triton"):
        InductorBackend().check_available(args)
    monkeypatch.setattr(torch_boundary, "has_triton", lambda: True)
    InductorBackend().check_available(args)
