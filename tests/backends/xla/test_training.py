"""backend="xla" end to end, in a worker process with 4 simulated CPU devices (xla_worker.py).

10 steps of RoBERTa MLM (with label sparsity) and GPT-2 (tied head) through TurboTrainer(backend="xla")
match stock Trainer's losses within 1e-4 relative, on 4 devices and on 1 (same global batch); the
model written by save_model loads in stock Transformers and gives the stock-trained model's logits;
evaluation, gradient accumulation and resuming from an xla checkpoint agree with stock as well; the
compiled forward/backward gives eager's loss and every gradient on an odd-shaped batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer_helpers import assert_losses_close

pytestmark = pytest.mark.requires_xla

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "JAX_PLATFORMS": "cpu"}
RTOL = 1e-4


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("xla")
    done = subprocess.run(
        [sys.executable, "-m", "tests.backends.xla.xla_worker", str(out)],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    return json.loads((out / "results.json").read_text())


def test_the_worker_saw_four_devices(results):
    assert results["devices"] == 4


@pytest.mark.parametrize("family", ["roberta", "gpt2"])
def test_four_and_one_devices_match_stock_trainer(results, family):
    runs = results[family]
    assert len(runs["stock"]["losses"]) == 10
    assert_losses_close(runs["xla4"]["losses"], runs["stock"]["losses"], rtol=RTOL)
    assert_losses_close(runs["xla1"]["losses"], runs["stock"]["losses"], rtol=RTOL)
    assert_losses_close(runs["xla4"]["losses"], runs["xla1"]["losses"], rtol=RTOL)
    assert_losses_close(runs["xla4"]["grad_norms"], runs["stock"]["grad_norms"], rtol=1e-3)
    assert runs["xla4"]["report"]["devices"] == 4 and runs["xla1"]["report"]["devices"] == 1
    for run in ("xla4", "xla1"):  # one compile per input shape: the state is placed like the step's outputs
        assert runs[run]["report"]["compiles"] == runs[run]["report"]["compiled_shapes"]


@pytest.mark.parametrize("family", ["roberta", "gpt2"])
def test_evaluation_during_training_matches_stock(results, family):
    runs = results[family]
    assert len(runs["stock"]["eval"]) == 2
    assert_losses_close(runs["xla4"]["eval"], runs["stock"]["eval"], rtol=RTOL)


@pytest.mark.parametrize("family", ["roberta", "gpt2"])
def test_saved_model_loads_in_stock_transformers_with_the_same_logits(results, family):
    assert results[family]["logits_gap"] < 1e-4


@pytest.mark.parametrize("family", ["roberta", "gpt2"])
def test_compiled_gradients_match_eager_on_an_odd_shaped_batch(results, family):
    gaps = results[family]["gradients"]
    assert gaps["rows"] % 4 == 0  # label sparsity's kept rows, padded and split over the devices
    assert gaps["loss_gap"] < 1e-5
    assert gaps["max_grad_gap"] < 1e-5, gaps["worst"]


def test_dropout_masks_come_from_the_step_key_not_from_the_trace(results):
    same_key, again, other_key = results["gpt2"]["dropout_losses"]
    assert same_key == again  # the key decides the masks...
    assert abs(other_key - same_key) > 1e-4  # ...and a new key (every step gets one) draws new ones


def test_label_sparsity_ran_with_static_rows(results):
    assert results["roberta"]["xla4"]["report"]["label_sparsity"]


def test_tied_head_stays_tied(results):
    gpt2 = results["gpt2"]
    assert gpt2["tied"]
    loaded, stock = gpt2["parameters"]
    assert loaded == stock


def test_gradient_accumulation_matches_stock(results):
    gpt2 = results["gpt2"]
    assert_losses_close(gpt2["xla_accumulation"]["losses"], gpt2["stock_accumulation"]["losses"], rtol=RTOL)


def test_resume_from_an_xla_checkpoint_continues_the_same_run(results):
    resumed = results["gpt2"]["resumed"]
    assert resumed["steps"] == list(range(1, 11))  # 5 from the checkpoint's history, 5 trained after resuming
    assert_losses_close(resumed["losses"], results["gpt2"]["xla4"]["losses"], rtol=RTOL)
