"""Every run logs one WARNING-level line: backend, active passes, optimizer, and what is not active and why;
an fp32 CPU run gets one line on bf16 (bf16_hint.py)."""

from __future__ import annotations

import logging

from tests.trainer_helpers import turbo_trainer
from turbotrain.training import bf16_hint as hint_module
from turbotrain.training.bf16_hint import bf16_hint
from turbotrain.training.run_summary import not_active, summary_line


def summary_records(caplog):
    return [r for r in caplog.records if r.name == "turbotrain" and r.getMessage().startswith("turbotrain: backend")]


def test_one_warning_level_summary_line_per_run(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path / "cache"))
    trainer = turbo_trainer("roberta", tmp_path, max_steps=2, padding_free=False, label_smoothing_factor=0.1)
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        trainer.train()
    (record,) = summary_records(caplog)
    assert record.levelno == logging.WARNING
    line = record.getMessage()
    assert "backend auto: eager (a run of 2 steps is too short" in line and "passes: embedding_grad" in line
    assert "padding_free (off by option)" in line
    assert "label_sparsity (label smoothing or a custom compute_loss_func reads the full logits)" in line


def test_backend_refusals_are_named():
    from turbotrain.args import TurboOptions

    requested = TurboOptions(backend="xla")
    effective = requested.without({"padding_free": "static shapes"}, "xla")
    reasons = not_active(
        requested,
        effective,
        ["label_sparsity"],
        {"padding_free": "not used with backend xla"},
        skipped=["embedding_grad"],
    )  # fused_activation: nothing to do, not listed
    assert reasons == {
        "padding_free": "not used with backend xla",
        "embedding_grad": "refused for this model: see the log above",
    }
    assert summary_line("xla", ["label_sparsity"], "adamw_torch", reasons).endswith(
        "not active: padding_free (not used with backend xla); embedding_grad (refused for this model: see the "
        "log above)"
    )


def test_bf16_hint_says_emulated_without_bf16_units():
    assert "bf16 would be emulated and slower" in bf16_hint(flags=frozenset({"avx2", "avx512f"}))


def test_bf16_hint_reports_the_measured_speedup_with_amx():
    line = bf16_hint(flags=frozenset({"amx_bf16", "amx_tile"}), measure=lambda: (6.2, 373.0, 2319.0))
    assert "bf16 matmul units (amx_bf16)" in line and "measured 6.2x faster" in line and "2,319 vs 373" in line


def test_bf16_hint_is_honest_when_bf16_is_not_faster():
    line = bf16_hint(flags=frozenset({"avx512_bf16"}), measure=lambda: (0.9, 100.0, 90.0))
    assert "only 0.90x fp32" in line


def test_the_bf16_probe_is_measured_once_per_machine_and_cached_like_autos_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path))
    calls = []

    def measure():
        calls.append(1)
        return 4.8, 50.0, 240.0

    key = hint_module.probe_key()
    assert hint_module.cached_speedup(key, measure) == (4.8, 50.0, 240.0)
    assert hint_module.cached_speedup(key, measure) == (4.8, 50.0, 240.0) and len(calls) == 1  # read back
    assert (tmp_path / hint_module.CACHE_FILE).is_file()  # beside auto's auto_backend.json (utils/cache.py)
    hint_module.cached_speedup("another machine or torch", measure)
    assert len(calls) == 2
    monkeypatch.setattr(hint_module.torch, "get_num_threads", lambda: 97)
    assert hint_module.probe_key() != key  # other threads, other figures


def test_fp32_cpu_run_logs_the_bf16_line_at_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="turbotrain"):
        turbo_trainer("roberta", tmp_path, max_steps=1)
    assert any("bf16" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_summary_says_when_auto_chunked_cross_entropy_is_used(tmp_path):
    from tests.tiny_models import llm

    auto = turbo_trainer("llama", tmp_path, model=llm(vocab=50_000))
    assert "chunked_cross_entropy (auto: calls with more than 335 kept rows (64 MB of logits))" in auto.turbo_summary()
    always = turbo_trainer("llama", tmp_path, model=llm(vocab=50_000), chunked_cross_entropy="always")
    assert "passes: label_sparsity, chunked_cross_entropy," in always.turbo_summary()


def test_a_classifier_does_not_list_label_sparsity_as_refused(tmp_path):
    # run_glue.py's summary said "label_sparsity (refused for this model: see the log above)" with no
    # warning anywhere: a classifier has no vocabulary head, nothing to gain and nothing to refuse.
    from tests.tiny_models import make

    trainer = turbo_trainer("roberta", tmp_path, model=make("roberta", task="cls"), max_steps=1)
    assert trainer.turbo_report.label_sparsity is None
    assert "label_sparsity" not in trainer.turbo_summary()


def test_a_trainer_with_its_own_loss_says_why_padding_free_steps_aside(tmp_path):
    from transformers import Trainer

    from tests.tiny_models import make
    from tests.trainer_helpers import COMMON, dataset
    from turbotrain import TurboTrainingArguments, turbo

    class OwnLoss(Trainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            return super().compute_loss(model, inputs, *args, **kwargs)

    args = TurboTrainingArguments(output_dir=str(tmp_path), **COMMON)
    trainer = turbo(OwnLoss)(model=make("roberta", dropout=False), args=args, train_dataset=dataset())
    assert not trainer.turbo_options.padding_free and trainer.turbo_report.padding_free is None
    assert "padding_free (TurboOwnLoss computes its own loss, which may read rows)" in trainer.turbo_summary()


def test_passes_a_model_has_nothing_for_are_named_with_what_it_lacks():
    from turbotrain.args import TurboOptions

    options = TurboOptions()
    lacks = {"padding_free": "Wav2Vec2ForCTC takes input_values, not token ids"}
    reasons = not_active(options, options, [], {}, [], lacks)
    assert reasons == {"padding_free": "does not apply: Wav2Vec2ForCTC takes input_values, not token ids"}
