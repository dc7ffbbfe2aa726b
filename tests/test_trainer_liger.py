"""TurboTrainer with `use_liger_kernel=True`: Trainer hands the model to Liger's per-instance patch
(boundaries/liger_boundary.py). What Liger replaces (the model's forward: its fused head and loss; each gated MLP's
forward), turbotrain leaves to it, and the summary says why; every other pass stays; the losses are stock Trainer's
with the same Liger. `liger_kernel_config` turning Liger's parts off keeps turbotrain's. Liger's kernels are
Triton's, so tests/fake_liger.py stands in for them with torch's arithmetic and Liger 0.8.2's patch mechanism."""

from __future__ import annotations

import pytest

from tests import fake_liger
from tests.tiny_models import make
from tests.trainer_helpers import (
    RightPaddingCollator,
    assert_losses_close,
    stock_trainer,
    train_losses,
    turbo_trainer,
    variable_length_dataset,
)
from turbotrain.boundaries import liger_boundary

COMMON = dict(train_dataset=variable_length_dataset(n=24, max_len=37), learning_rate=5e-3, max_steps=4)


def _both(tmp_path, **liger):
    stock = stock_trainer("llama", tmp_path, model=make("llama", dropout=False), use_liger_kernel=True, **liger,
                          **COMMON)  # fmt: skip
    turbo = turbo_trainer("llama", tmp_path, model=make("llama", dropout=False), use_liger_kernel=True, **liger,
                          **COMMON)  # fmt: skip
    for trainer in (stock, turbo):
        trainer.data_collator = RightPaddingCollator()
    return stock, turbo


def test_what_liger_replaces_is_left_to_it_and_named_and_the_losses_are_stocks(tmp_path, monkeypatch):
    calls = fake_liger.install(monkeypatch)
    stock, turbo = _both(tmp_path)
    applied, refused = turbo.turbo_report.applied, turbo.turbo_refused
    assert "label_sparsity" not in applied and "Liger's fused linear cross-entropy" in refused["label_sparsity"]
    assert "lean_gated_mlp" not in applied and "Liger's SwiGLU" in refused["lean_gated_mlp"]
    assert "padding_free" in applied  # what Liger does not touch stays turbotrain's
    summary = turbo.turbo_summary()
    assert "use_liger_kernel=True: Liger's fused linear cross-entropy" in summary and "Liger's SwiGLU" in summary
    assert_losses_close(train_losses(turbo), train_losses(stock), rtol=1e-5)
    assert len(calls) == 2 and all(call["fused_linear_cross_entropy"] and call["swiglu"] for call in calls)


def test_liger_parts_turned_off_leave_turbotrains_passes_on(tmp_path, monkeypatch):
    fake_liger.install(monkeypatch)
    config = {"fused_linear_cross_entropy": False, "swiglu": False}
    stock, turbo = _both(tmp_path, liger_kernel_config=config)
    assert {"label_sparsity", "lean_gated_mlp", "padding_free"} <= set(turbo.turbo_report.applied)
    assert_losses_close(train_losses(turbo), train_losses(stock), rtol=1e-5)


@pytest.mark.parametrize(
    "config,expected",
    [
        (None, {"forward", "mlp"}),
        ({"fused_linear_cross_entropy": False}, {"mlp"}),
        ({"swiglu": False, "geglu": True}, {"forward"}),  # a keyword the function does not take is not Liger's
    ],
)
def test_the_boundary_reads_ligers_table_and_its_defaults(monkeypatch, config, expected):
    from types import SimpleNamespace

    fake_liger.install(monkeypatch)
    args = SimpleNamespace(use_liger_kernel=True, liger_kernel_config=config)
    assert liger_boundary.liger_replaces(make("llama"), args) == expected
    assert liger_boundary.liger_replaces(make("gpt2"), args) == frozenset()  # a type Liger does not patch
    assert liger_boundary.liger_replaces(make("llama"), SimpleNamespace(use_liger_kernel=False)) == frozenset()


def test_what_liger_already_bound_is_read_from_the_instance(monkeypatch):
    """Transformers 5.0 patches in Trainer's __init__, before a TRL trainer turns Liger's fused loss off in its own
    config: the instance says what was replaced."""
    from types import SimpleNamespace

    fake_liger.install(monkeypatch)
    model = make("llama")
    fake_liger._apply_liger_kernel_to_instance(model)
    args = SimpleNamespace(use_liger_kernel=True, liger_kernel_config={"fused_linear_cross_entropy": False})
    assert liger_boundary.liger_replaces(model, args) == {"forward", "mlp"}
    assert liger_boundary.already_replaced(make("llama")) == frozenset()


def test_a_liger_release_without_the_table_reads_as_replacing_everything(monkeypatch):
    from types import SimpleNamespace

    fake_liger.install(monkeypatch)
    monkeypatch.delattr(
        fake_liger.sys.modules["liger_kernel.transformers.monkey_patch"], "MODEL_TYPE_TO_APPLY_LIGER_FN"
    )
    args = SimpleNamespace(use_liger_kernel=True, liger_kernel_config=None)
    assert liger_boundary.liger_replaces(make("gpt2"), args) == {"forward", "mlp"}


def test_without_liger_kernel_nothing_is_read_as_replaced(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(liger_boundary.importlib.util, "find_spec", lambda name: None)
    args = SimpleNamespace(use_liger_kernel=True, liger_kernel_config=None)
    assert liger_boundary.liger_replaces(make("llama"), args) == frozenset()


@pytest.mark.requires_liger
def test_ligers_own_table_has_the_names_the_boundary_reads():
    """Pinned against the real package where it is installed (a GPU image with the carried wheels)."""
    import inspect

    from liger_kernel.transformers import monkey_patch

    table = getattr(monkey_patch, liger_boundary.LIGER_TABLE)
    for model_type in ("llama", "qwen2", "mistral"):
        parameters = inspect.signature(table[model_type]).parameters
        assert parameters[liger_boundary.FORWARD].default is True and parameters["swiglu"].default is True
    assert "geglu" in inspect.signature(table["gemma2"]).parameters
