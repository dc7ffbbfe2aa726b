"""backend='onnxruntime': forward and backward graphs run in ONNX Runtime with eager's loss and gradients.

Parity (one step, batch 3 x 37, fp32, relative 1e-5 of each gradient's scale) for BERT and Llama, RoBERTa
masked-LM with label sparsity, GPT-2 with dropout on (masks drawn by torch); 10 golden steps through
TurboTrainer; a second process trains from the disk cache without exporting; failures to export or to
match fall back to eager with one warning and unchanged numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests import tiny_models
from tests.parity import assert_same_relative_to_scale, loss_and_grads
from tests.trainer_helpers import assert_losses_close, stock_trainer, train_losses
from turbotrain.backends import BackendUnavailable, ort_graph
from turbotrain.backends.onnxruntime import OrtOptions, ort_compiler, ort_config
from turbotrain.backends.ort_graph import STATS, OrtConfig
from turbotrain.passes import optimize
from turbotrain.utils.warnings import TurbotrainWarning

pytestmark = pytest.mark.requires_onnx
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Dynamo reuses compiled frames across models of the same class within a process; every test here
    must compile (and so export) its own graphs."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def one_step(model, batch, seed: int = 0):
    return loss_and_grads(model, batch, seed=seed)


def assert_same_step(got, expected, rtol: float = 1e-5):
    assert_same_relative_to_scale(expected, got, rtol)


CASES = {  # family, dropout, label sparsity
    "bert": ("bert", False, False),
    "roberta-label-sparsity": ("roberta", False, True),
    "gpt2-dropout": ("gpt2", True, False),
    "llama": ("llama", False, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_and_gradients_equal_eager(case):
    family, dropout, label_sparsity = CASES[case]
    batch = tiny_models.batch(3, 37, keep=0.3, seed=1)
    expected = one_step(tiny_models.make(family, dropout=dropout), batch)
    model = tiny_models.make(family, dropout=dropout)
    if label_sparsity:
        assert "label_sparsity" in optimize(model, padding_free=False, embedding_grad=False).applied
    fallbacks, exports = len(STATS.fallbacks), STATS.exports
    model.compile(backend=ort_compiler(OrtConfig(cache_dir=None)))
    assert_same_step(one_step(model, batch), expected)
    assert STATS.exports >= exports + 2, "a forward and a backward graph must have been exported"
    assert STATS.fallbacks[fallbacks:] == [], "every graph must run in ONNX Runtime"


TRAIN_IN_A_FRESH_PROCESS = """
import json, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.trainer_helpers import train_losses, turbo_trainer
trainer = turbo_trainer("roberta", Path({out!r}), backend="onnxruntime", max_steps=10,
                        backend_options={{"cache_dir": {cache!r}}})
losses = train_losses(trainer)
print(json.dumps({{"report": trainer.backend.report(), "losses": losses, "backend": trainer.backend.name}}))
"""


def train_in_a_fresh_process(out: Path, cache: Path) -> dict:
    code = TRAIN_IN_A_FRESH_PROCESS.format(root=str(ROOT), out=str(out), cache=str(cache))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_golden_steps_through_turbotrainer_and_a_second_process_uses_the_cache(tmp_path):
    """Two fresh processes run the same script, as a user would: the first exports, the second loads
    every graph from the cache; both give stock Trainer's losses (10 golden steps, dropout on)."""
    cache = tmp_path / "cache"
    first = train_in_a_fresh_process(tmp_path / "first", cache)
    assert first["backend"] == "onnxruntime"
    assert first["report"]["exports"] >= 2 and first["report"]["fallbacks"] == [], first["report"]
    assert_losses_close(first["losses"], train_losses(stock_trainer("roberta", tmp_path, max_steps=10)), rtol=1e-4)
    assert any(cache.glob("*.onnx"))

    second = train_in_a_fresh_process(tmp_path / "second", cache)
    assert second["report"]["exports"] == 0, second["report"]
    assert second["report"]["cache_hits"] == first["report"]["exports"]
    assert_losses_close(second["losses"], first["losses"], rtol=1e-6)


def assert_falls_back_with_eager_numbers(family: str, batch, warning: str) -> None:
    expected = one_step(tiny_models.make(family, dropout=False), batch)
    model = tiny_models.make(family, dropout=False)
    model.compile(backend=ort_compiler(OrtConfig(cache_dir=None)))
    with pytest.warns(TurbotrainWarning, match=warning):
        got = one_step(model, batch)
    assert_same_step(got, expected, rtol=1e-6)


def test_a_graph_that_fails_to_export_runs_eagerly_with_a_warning(monkeypatch):
    def refuse(*args, **kwargs):
        raise ort_graph.ExportError("no translation", op="aten.fancy_op.default")

    monkeypatch.setattr(ort_graph, "export_module", refuse)
    assert_falls_back_with_eager_numbers(
        "bert", tiny_models.batch(2, 9, keep=0.5), "runs in eager PyTorch instead: ONNX export failed at aten.fancy_op"
    )


def test_a_graph_whose_outputs_differ_from_eager_falls_back(monkeypatch):
    original = ort_graph.OrtGraph._run_session

    def perturbed(self, tensors, *rest):
        return [t * 1.01 if t.is_floating_point() else t for t in original(self, tensors, *rest)]

    monkeypatch.setattr(ort_graph.OrtGraph, "_run_session", perturbed)
    assert_falls_back_with_eager_numbers("llama", tiny_models.batch(2, 11, keep=0.5), "its outputs differ from eager")


def test_options_are_checked(tmp_path):
    from turbotrain import TurboTrainingArguments

    with pytest.raises(ValueError, match=r"unknown backend_options \['provider'\] for backend 'onnxruntime'"):
        TurboTrainingArguments(output_dir=str(tmp_path), backend="onnxruntime", backend_options={"provider": "x"})
    options = OrtOptions.from_dict({"providers": ["NoSuchExecutionProvider"]}, "onnxruntime")
    with pytest.raises(BackendUnavailable, match="NoSuchExecutionProvider"):
        ort_config(options, torch.device("cpu"))


def test_a_graph_with_no_op_runs_as_is_without_export_or_warning(monkeypatch, tmp_path):
    # Dynamo leaves `return ()` graphs around graph breaks (seen in the Whisper benchmark, after a recompile):
    # nothing to run, so nothing to export, and no fallback to warn about
    def refuse(*args, **kwargs):
        raise AssertionError("an empty graph was exported")

    monkeypatch.setattr(ort_graph, "export_module", refuse)
    fx_graph = torch.fx.Graph()
    fx_graph.output(())
    empty = torch.fx.GraphModule(torch.nn.Module(), fx_graph)  # forward(self): return ()
    fallbacks = len(STATS.fallbacks)
    graph = ort_graph.OrtGraph(empty, [], OrtConfig(cache_dir=tmp_path), "forward")
    assert graph() == () and len(STATS.fallbacks) == fallbacks
