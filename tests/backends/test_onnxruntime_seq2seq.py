"""The onnxruntime backend on encoder-decoder LMs with label sparsity, with no graph falling back: BART's loss
and every gradient equal eager's (the decoder-start column written by `shift_tokens_right` once made ONNX
Runtime refuse the forward graph: `broadcast_copies`); Whisper through `turbo(Seq2SeqTrainer)` gives the
eager backend's losses (its Conv1d front end once sent the backward graph to eager: `export/conv_backward.py`)."""

from __future__ import annotations

import copy

import pytest
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

import turbotrain
from tests.parity import assert_same, loss_and_grads
from tests.tiny_seq2seq import batch, make, speech_like_examples
from tests.trainer_helpers import COMMON, assert_losses_close, train_losses
from turbotrain import turbo, turbo_arguments
from turbotrain.backends.ort_graph import STATS
from turbotrain.data.speech import SpeechCollator


@pytest.mark.requires_onnx
def test_bart_with_label_sparsity_on_onnxruntime_matches_eager():
    eager = make("bart", dropout=False)
    turbotrain.optimize(eager, padding_free=False)
    ort = turbotrain.compile(copy.deepcopy(eager), backend="onnxruntime", backend_options={"cache_dir": None})
    fallbacks = len(STATS.fallbacks)
    inputs = batch("bart", 3, 11, [7, 3, 9], keep=0.6)  # one step: ~1 min of export on 2 busy cores
    assert_same(loss_and_grads(eager, inputs), loss_and_grads(ort, inputs), rtol=1e-5, atol=1e-6)
    assert STATS.fallbacks[fallbacks:] == []


def whisper_trainer(tmp_path, backend: str):
    args = turbo_arguments(Seq2SeqTrainingArguments)(
        output_dir=str(tmp_path / backend),
        backend=backend,
        backend_options={"cache_dir": None} if backend == "onnxruntime" else None,
        **{**COMMON, "max_steps": 4},
    )
    data, collator = speech_like_examples(16), SpeechCollator()
    return turbo(Seq2SeqTrainer)(model=make("whisper"), args=args, train_dataset=data, data_collator=collator)


@pytest.mark.requires_onnx
def test_whisper_through_seq2seq_trainer_runs_every_graph_in_onnxruntime(tmp_path):
    ort = whisper_trainer(tmp_path, "onnxruntime")  # dropout 0.1 on: masks drawn by torch, as eager draws them
    fallbacks, exports = len(STATS.fallbacks), STATS.exports
    losses = train_losses(ort)
    report = ort.backend.report()  # counts of the whole process
    assert report["exports"] >= exports + 2 and report["fallbacks"][fallbacks:] == [], report
    assert_losses_close(losses, train_losses(whisper_trainer(tmp_path, "eager")), rtol=1e-5)
