"""The backend registry maps names to small classes; adding one is one file."""

from __future__ import annotations

import pytest

from turbotrain.backends import Backend, backend_names, get_backend, register_backend
from turbotrain.backends import backend_registry as registry


def test_builtin_backends_are_registered():
    assert {"eager", "inductor"} <= set(backend_names())


def test_auto_is_the_measuring_backend():
    assert get_backend("auto").summary().startswith("auto: ")


def test_a_backend_owns_its_loop_exactly_when_it_replaces_trainers():
    # the trainer reads `owns_loop` (its collator steps' place), Trainer's boundary calls `training_loop`
    for name in backend_names():
        cls = registry.backend_class(name)
        assert cls.owns_loop == (cls.training_loop is not Backend.training_loop), name
    assert registry.backend_class("xla").owns_loop and not registry.backend_class("eager").owns_loop


def test_unknown_name_raises_with_valid_list():
    with pytest.raises(ValueError, match="valid backends: auto, eager"):
        get_backend("nope")


def test_registering_a_backend_makes_it_selectable(monkeypatch):
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))

    @register_backend
    class Dummy(Backend):
        name = "dummy"

    assert isinstance(get_backend("dummy"), Dummy) and "dummy" in registry.valid_choices()
    with pytest.raises(ValueError, match="already registered"):
        register_backend(type("Other", (Backend,), {"name": "dummy"}))


@pytest.mark.parametrize("name", ["inductor", "onnxruntime", "xla"])
def test_a_backend_that_compiles_the_step_refuses_trainers_own_torch_compile(name):
    from types import SimpleNamespace

    import torch

    from turbotrain.backends import BackendUnavailable

    args = SimpleNamespace(torch_compile=True, torch_compile_backend="inductor", device=torch.device("cpu"))
    with pytest.raises(BackendUnavailable, match=f"backend='{name}' compiles the training step itself.*torch_compile"):
        get_backend(name).check_available(args)
