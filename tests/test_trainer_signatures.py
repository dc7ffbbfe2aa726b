"""Every Trainer method turbotrain's classes override keeps the stock class's signature and kind (issue 36).

A static method stays static (`TurboTrainer.get_optimizer_cls_and_kwargs(args)` is Transformers' documented
call), a class method stays a class method, and parameters keep their names, kinds and defaults, so code
written against the stock class (a subclass's `super()` call, a keyword argument) works unchanged.
"""

from __future__ import annotations

import inspect

import pytest
from transformers import Seq2SeqTrainer, Trainer, TrainingArguments

from turbotrain import TurboSeq2SeqTrainer, TurboTrainer, turbo


def overridden_names(turbo_class: type, stock_class: type) -> set[str]:
    """The names turbotrain's own classes in `turbo_class`'s MRO define that `stock_class` has too."""
    ours = [owner for owner in turbo_class.__mro__ if owner.__module__.startswith("turbotrain")]
    names = {name for owner in ours for name in vars(owner) if callable(getattr(stock_class, name, None))}
    return {name for name in names if not name.startswith("__") or name == "__init__"}


def kind(cls: type, name: str) -> str:
    return type(inspect.getattr_static(cls, name)).__name__  # function, staticmethod, classmethod


def parameters(cls: type, name: str) -> list[tuple]:
    """(name, kind, default) of each parameter: what a caller relies on (annotations are not compared)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(getattr(cls, name)).parameters.values()]


def assert_same_methods(turbo_class: type, stock_class: type) -> None:
    names = overridden_names(turbo_class, stock_class)
    assert {"__init__", "train", "create_optimizer", "_save_checkpoint"} <= names
    for name in sorted(names):
        assert kind(turbo_class, name) == kind(stock_class, name), name
        assert parameters(turbo_class, name) == parameters(stock_class, name), name


@pytest.mark.parametrize(
    ("turbo_class", "stock_class"), [(TurboTrainer, Trainer), (TurboSeq2SeqTrainer, Seq2SeqTrainer)]
)
def test_overridden_methods_keep_transformers_signatures_and_kinds(turbo_class, stock_class):
    assert_same_methods(turbo_class, stock_class)


@pytest.mark.requires_llm
@pytest.mark.parametrize("name", ["SFTTrainer", "DPOTrainer"])
def test_overridden_methods_keep_trl_signatures_and_kinds(name):
    import trl

    assert_same_methods(turbo(getattr(trl, name)), getattr(trl, name))


def test_get_optimizer_cls_and_kwargs_is_called_as_transformers_documents(tmp_path):
    args = TrainingArguments(output_dir=str(tmp_path), optim="adamw_torch")
    assert TurboTrainer.get_optimizer_cls_and_kwargs(args) == Trainer.get_optimizer_cls_and_kwargs(args)
