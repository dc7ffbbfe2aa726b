"""backend='auto' measures eager against inductor on the run's own steps, keeps the faster, logs and caches it."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
import torch

from tests.tiny_models import make
from tests.trainer_helpers import assert_losses_close, stock_trainer, train_losses, turbo_trainer
from turbotrain.backends import auto, get_backend
from turbotrain.backends.auto import CACHE_FILE, MAX_COMPILING_STEPS, AutoChooser, length_bucket, run_key_parts
from turbotrain.training.run_summary import MADE


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_auto_stays_eager_on_a_run_too_short_to_measure(tmp_path, private_cache, caplog):
    trainer = turbo_trainer("gpt2", tmp_path, max_steps=3)
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        trainer.train()
    assert trainer.backend.name == "auto" and trainer.backend.choice == "eager"
    assert trainer.model._compiled_call_impl is None
    assert "auto: eager (a run of 3 steps is too short" in caplog.text
    assert not (private_cache / CACHE_FILE).exists()


@pytest.mark.parametrize("eager_s, inductor_s, expected", [(1.0, 2.0, "eager"), (2.0, 1.0, "inductor")])
def test_auto_keeps_the_faster_median(private_cache, eager_s, inductor_s, expected, caplog):
    backend = get_backend("auto", {"measure_steps": 2})
    backend.wrap_model(torch.nn.Linear(2, 2))
    chooser = AutoChooser(backend)
    chooser.key = "k"
    backend.use("inductor")  # as after the eager steps; compile is lazy, nothing runs here
    chooser.times = {"eager": [eager_s, eager_s * 1.1], "inductor": [inductor_s, inductor_s * 1.1]}
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        chooser.decide()
    assert backend.choice == expected
    assert (backend.model._compiled_call_impl is not None) == (expected == "inductor")
    assert f"turbotrain auto: {expected} chosen" in caplog.text
    assert json.loads((private_cache / CACHE_FILE).read_text())["k"]["choice"] == expected


@pytest.mark.requires_compiler
def test_auto_measures_both_on_the_real_steps_matches_stock_and_caches(tmp_path, private_cache, caplog):
    options = {"min_steps": 0, "min_eager_s": 0, "measure_steps": 1, "scope": "blocks"}
    kw = dict(max_steps=8, backend_options=options)
    turbo = turbo_trainer("gpt2", tmp_path, model=make("gpt2", dropout=False), **kw)
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        losses = train_losses(turbo)
    report = turbo.backend.report()
    assert report["choice"] in ("eager", "inductor") and report["eager_step_s"] > 0 and report["inductor_step_s"] > 0
    assert f"turbotrain auto: {report['choice']} chosen" in caplog.text
    assert f"auto: {report['choice']} (measured on this run's steps: eager" in MADE[-1].summary
    stock = train_losses(stock_trainer("gpt2", tmp_path, model=make("gpt2", dropout=False), max_steps=8))
    assert_losses_close(losses, stock, rtol=1e-5)
    again = turbo_trainer("gpt2", tmp_path, model=make("gpt2", dropout=False), **kw)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        again.train()
    assert f"auto: {report['choice']} (cached measurement" in caplog.text


@pytest.mark.requires_compiler
def test_auto_keeps_eager_where_the_rest_of_the_run_could_not_pay_for_a_compile(tmp_path, private_cache, caplog):
    trainer = turbo_trainer("gpt2", tmp_path, max_steps=60)  # >= min_steps, but ~0.01 s a step: ~1 s left
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        losses = train_losses(trainer)
    assert trainer.backend.choice == "eager" and trainer.model._compiled_call_impl is None
    assert "too short to pay for compiling inductor: measuring needs >= 120 s of eager steps left" in caplog.text
    assert "eager (the rest of the run, 51 steps at eager's" in trainer.backend.summary()
    assert "too short to pay for compiling" in MADE[-1].summary  # the run's last line (`turbotrain run`) says it
    assert not (private_cache / CACHE_FILE).exists()  # this run's length, not the machine's answer
    assert len(losses) == 60


@pytest.mark.parametrize("steps_left, measured", [(1000, False), (8000, True)])
def test_inductor_is_measured_only_with_min_eager_s_of_eager_steps_left(monkeypatch, steps_left, measured):
    driven = SteppedChooser(monkeypatch)
    driven.chooser.steps_left = steps_left
    for seconds in (9.0, 0.02, 0.02):  # warm-up, two eager steps; then 997 or 7997 steps of 0.02 s are left
        driven.step(seconds)
    assert driven.chooser.measuring is measured
    assert driven.backend.choice == ("inductor" if measured else "eager")
    if not measured:
        assert "997 steps at eager's 0.020 s/step = 20 s" in driven.backend.plan


@pytest.mark.requires_compiler
def test_auto_steps_aside_for_trainers_own_torch_compile_and_the_passes_stay_exact(tmp_path, private_cache):
    # accelerate compiles the model for Trainer; auto measured "eager" (already compiled) against a second,
    # nested compile before
    kw = dict(max_steps=3, torch_compile=True)
    measure_at_once = {"min_steps": 0, "min_eager_s": 0, "measure_steps": 1}  # what compiled in place before
    turbo = turbo_trainer("gpt2", tmp_path, model=make("gpt2", dropout=False), backend_options=measure_at_once, **kw)
    losses = train_losses(turbo)
    assert "auto: Trainer's own torch.compile (torch_compile=True, inductor)" in turbo.turbo_summary()
    assert turbo.backend.choice == "eager" and turbo.model._compiled_call_impl is None  # nothing compiled in place
    assert {"label_sparsity", "padding_free"} <= set(turbo.turbo_report.applied)
    stock = train_losses(stock_trainer("gpt2", tmp_path, model=make("gpt2", dropout=False), **kw))
    assert_losses_close(losses, stock, rtol=1e-5)


def planned(backend, max_steps: int, global_step: int = 0) -> AutoChooser:
    chooser = AutoChooser(backend)
    state = SimpleNamespace(max_steps=max_steps, global_step=global_step)
    chooser.on_train_begin(key_args(), state, None)
    return chooser


def test_each_train_call_plans_anew():
    backend = get_backend("auto", {"cache": False})
    backend.check_available(key_args(device=torch.device("cpu"), torch_compile=False))
    backend.wrap_model(torch.nn.Linear(2, 2))
    backend.plan = "inductor (measured on this run's steps: ...)"  # what a first train() left
    planned(backend, max_steps=3)
    assert backend.plan.startswith("eager (a run of 3 steps is too short") and backend.choice == "eager"
    chooser = planned(backend, max_steps=200)
    assert chooser.measuring and chooser.steps_left == 200 and backend.plan.startswith("eager, then the faster")


def test_a_resumed_run_counts_only_the_steps_it_has_left():
    backend = get_backend("auto", {"cache": False})
    backend.check_available(key_args(device=torch.device("cpu"), torch_compile=False))
    backend.wrap_model(torch.nn.Linear(2, 2))
    chooser = planned(backend, max_steps=1000, global_step=995)
    assert not chooser.measuring and "a run of 5 steps is too short" in backend.plan


@pytest.mark.parametrize("steps, kept", [(100, "eager"), (10_000, "inductor")])
def test_a_cached_inductor_choice_is_not_compiled_for_a_run_too_short_to_pay(private_cache, steps, kept):
    backend = get_backend("auto")
    backend.check_available(key_args(device=torch.device("cpu"), torch_compile=False))
    backend.wrap_model(torch.nn.Linear(2, 2))
    key = auto.run_key(key_args(), backend.model, "model", "?")
    auto.write_cache(key, {"choice": "inductor", "eager_step_s": 0.05, "inductor_step_s": 0.04, "date": "d"})
    planned(backend, max_steps=steps)  # 100 x 0.05 s = 5 s of eager steps; 10,000: 500 s
    assert backend.choice == kept and (backend.model._compiled_call_impl is not None) == (kept == "inductor")
    if kept == "eager":
        assert "chose inductor, but this run's 100 steps at that eager speed, 5 s, are too short" in backend.plan


def test_a_run_that_ends_while_measuring_says_so():
    backend = get_backend("auto", {"cache": False})
    backend.check_available(key_args(device=torch.device("cpu"), torch_compile=False))
    backend.wrap_model(torch.nn.Linear(2, 2))
    chooser = planned(backend, max_steps=100)
    chooser.on_train_end(None, None, None)  # an early-stopping callback ended it after a few steps
    assert backend.plan == "eager (the run ended before auto finished measuring)" and not chooser.measuring


def test_trainers_torch_compile_is_the_plan_of_every_run():
    backend = get_backend("auto")
    backend.check_available(key_args(torch_compile=True, torch_compile_backend=None))
    backend.wrap_model(torch.nn.Linear(2, 2))
    for steps in (3, 500):
        chooser = planned(backend, max_steps=steps)
        assert not chooser.measuring and backend.plan.startswith("Trainer's own torch.compile")


def key_args(**changes):
    base = dict(
        device=torch.device("cpu"),
        bf16=False,
        fp16=False,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        gradient_checkpointing=False,
        world_size=1,
        n_gpu=1,
    )
    return SimpleNamespace(**{**base, **changes})


def test_the_cache_key_holds_what_changes_the_answer():
    from turbotrain import optimize

    model = make("gpt2", dropout=False)
    base = run_key_parts(key_args(), model, "model", "128")
    assert run_key_parts(key_args(), model, "model", "128") == base
    other_attention = make("gpt2", dropout=False)
    other_attention.config._attn_implementation = "eager"
    optimized = make("gpt2", dropout=False)
    optimize(optimized, padding_free=False)
    frozen_but_the_head = make("gpt2", dropout=False)
    for name, parameter in frozen_but_the_head.named_parameters():
        parameter.requires_grad_(name.startswith("transformer.ln_f"))
    variants = [
        run_key_parts(key_args(), model, "model", "512"),  # length
        run_key_parts(key_args(world_size=4), model, "model", "128"),
        run_key_parts(key_args(bf16=True), model, "model", "128"),
        run_key_parts(key_args(gradient_checkpointing=True), model, "model", "128"),
        run_key_parts(key_args(), model.to(torch.bfloat16), "model", "128"),  # the weights' dtype
        run_key_parts(key_args(), other_attention, "model", "128"),
        run_key_parts(key_args(), optimized, "model", "128"),  # the passes installed
        run_key_parts(key_args(), make("gpt2", dropout=False), "blocks", "128"),
        run_key_parts(key_args(), frozen_but_the_head, "model", "128"),  # LoRA-like: few weights train
        run_key_parts(key_args(n_gpu=2), model, "model", "128"),
    ]
    assert all(variant != base for variant in variants)


def test_length_bucket_of_the_first_examples():
    loader = torch.utils.data.DataLoader([{"input_ids": [1] * n} for n in (5, 100, 37)], batch_size=None)
    assert length_bucket(loader) == "128"
    assert length_bucket(torch.utils.data.DataLoader([{"input_features": [0.0]}])) == "?"
    assert length_bucket(None) == "?"


class AugmentingDataset(torch.utils.data.Dataset):
    """Examples a transform changes at random (a random crop of the tokens), drawing from all three generators."""

    def __len__(self):
        return 8

    def __getitem__(self, index):
        import random

        import numpy

        keep = 20 + random.randrange(5) + int(numpy.random.randint(5)) + int(torch.randint(5, ()))
        return {"input_ids": list(range(keep))}


def test_reading_the_lengths_leaves_the_runs_random_generators_as_they_were():
    """auto sizes its cache key from the first examples; a transform that augments would otherwise move the
    generators the run draws from next (the sampler's shuffle, dropout masks): auto would train on other random
    numbers than eager."""
    import random

    import numpy

    def draws():
        return random.random(), float(numpy.random.rand()), float(torch.rand(()))

    loader = torch.utils.data.DataLoader(AugmentingDataset())
    random.seed(0), numpy.random.seed(0), torch.manual_seed(0)
    expected = draws()
    random.seed(0), numpy.random.seed(0), torch.manual_seed(0)
    assert length_bucket(loader) == "32"
    assert draws() == expected


class SteppedChooser:
    """An AutoChooser driven by hand: each step takes `seconds` and compiles `compiles` graphs."""

    def __init__(self, monkeypatch, measure_steps=2):
        self.backend = get_backend("auto", {"measure_steps": measure_steps, "cache": False})
        self.backend.wrap_model(torch.nn.Linear(2, 2))
        self.chooser = AutoChooser(self.backend)
        self.chooser.measuring = True
        self.clock, self.graphs = [0.0], [0]
        monkeypatch.setattr(auto.time, "perf_counter", lambda: self.clock[0])
        monkeypatch.setattr(auto, "compiles_so_far", lambda: self.graphs[0])

    def step(self, seconds: float, compiles: int = 0) -> None:
        self.chooser.on_step_begin(None, None, None)
        self.clock[0] += seconds
        self.graphs[0] += compiles
        self.chooser.on_step_end(None, None, None)


def test_steps_that_compile_are_not_timed(monkeypatch, caplog):
    driven = SteppedChooser(monkeypatch)
    for seconds in (9.0, 2.0, 2.5):  # warm-up, then two eager steps
        driven.step(seconds)
    assert driven.backend.choice == "inductor" and driven.chooser.times["eager"] == [2.0, 2.5]
    driven.step(30.0, compiles=2)  # the compile
    driven.step(1.0)
    driven.step(20.0, compiles=1)  # a recompile for a new shape, between timed steps
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        driven.step(1.5)
    assert driven.chooser.times["inductor"] == [1.0, 1.5]
    assert driven.backend.choice == "inductor" and driven.backend.figures["compile_s"] == 50.0
    assert "inductor chosen" in caplog.text


def test_inductor_that_keeps_recompiling_is_given_up(monkeypatch, caplog):
    driven = SteppedChooser(monkeypatch)
    for seconds in (9.0, 2.0, 2.0):
        driven.step(seconds)
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        for _ in range(MAX_COMPILING_STEPS + 1):
            driven.step(0.5, compiles=1)
    assert driven.backend.choice == "eager" and not driven.chooser.measuring
    assert "inductor compiled again" in caplog.text


def test_compile_with_auto_says_it_cannot_measure(caplog):
    import turbotrain

    module = torch.nn.Linear(2, 2)
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        compiled = turbotrain.compile(module, backend="auto")
    assert compiled is module and module._compiled_call_impl is None
    assert "no steps to measure" in turbotrain.training.compile_module.backend_of(module).summary()
    assert "runs eager" in caplog.text


def test_a_new_model_starts_eager_whatever_the_previous_one_ran():
    backend = get_backend("auto")
    backend.wrap_model(torch.nn.Linear(2, 2))
    backend.use("inductor")
    backend.wrap_model(torch.nn.Linear(2, 2))  # Trainer's model_init: a new model for the next trial
    assert backend.choice == "eager" and backend.model._compiled_call_impl is None
    backend.use("inductor")  # a cached choice now compiles the new model
    assert backend.model._compiled_call_impl is not None
