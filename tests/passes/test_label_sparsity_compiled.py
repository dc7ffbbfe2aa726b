"""Label sparsity under torch.compile: the kept-row count changes every step, and a compiled model must
treat it as a dynamic size after its first recompile, not recompile on every step.

Dynamo's own "eager" backend is used: recompilation is decided by Dynamo's guards, before any compiler."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from tests import tiny_models, tiny_seq2seq
from turbotrain import optimize

LENGTHS = [[9, 4, 7], [12, 3, 5], [6, 6, 2], [11, 8, 10], [5, 9, 3], [13, 2, 7], [4, 4, 12]]


def model_and_batches(family: str):
    if family == "whisper":
        model = tiny_seq2seq.make("whisper", dropout=False)
        batches = [tiny_seq2seq.batch("whisper", 3, 0, lengths, keep=0.8, seed=i) for i, lengths in enumerate(LENGTHS)]
    else:
        model = tiny_models.make(family, dropout=False)
        batches = [tiny_models.padded_batch(lengths, keep=0.6, seed=i) for i, lengths in enumerate(LENGTHS)]
    return model, batches


@pytest.mark.parametrize("family", ["whisper", "gpt2", "roberta"])
def test_no_recompile_once_the_row_count_is_dynamic(family):
    model, batches = model_and_batches(family)
    assert optimize(model, padding_free=False).label_sparsity is not None
    model.train()
    model.compile(backend="eager")
    torch._dynamo.reset()
    counters.clear()
    graphs = []
    for inputs in batches:
        model(**inputs).loss.backward()
        graphs.append(counters["stats"]["unique_graphs"])
    # the first steps compile and recompile once per size that turns out to vary; then nothing new
    assert graphs[3:] == [graphs[2]] * (len(graphs) - 3), graphs
