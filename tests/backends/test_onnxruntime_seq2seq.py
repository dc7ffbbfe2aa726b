"""The onnxruntime backend on an encoder-decoder LM with label sparsity: eager's loss and every gradient, with
no graph falling back (the decoder-start column written by `shift_tokens_right` once made ONNX Runtime refuse
the forward graph: `broadcast_copies`)."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("onnxruntime", reason="needs the onnx extra: pip install 'turbotrain[onnx]'")

import turbotrain
from tests.parity import assert_same, loss_and_grads
from tests.tiny_seq2seq import batch, make
from turbotrain.backends.ort_graph import STATS


@pytest.mark.onnx
def test_bart_with_label_sparsity_on_onnxruntime_matches_eager():
    eager = make("bart", dropout=False)
    turbotrain.optimize(eager, padding_free=False)
    ort = turbotrain.compile(copy.deepcopy(eager), backend="onnxruntime", backend_options={"cache_dir": None})
    fallbacks = len(STATS.fallbacks)
    inputs = batch("bart", 3, 11, [7, 3, 9], keep=0.6)  # one step: ~1 min of export on 2 busy cores
    assert_same(loss_and_grads(eager, inputs), loss_and_grads(ort, inputs), rtol=1e-5, atol=1e-6)
    assert STATS.fallbacks[fallbacks:] == []
