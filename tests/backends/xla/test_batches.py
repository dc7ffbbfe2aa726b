"""batches.py: the padding that gives the xla step fixed shapes changes neither the loss nor the gradients
(checked in eager torch, where any difference would show), and the buckets are what the docstring says."""

from __future__ import annotations

import pytest
import torch

from tests.parity import assert_same, loss_and_grads
from tests.tiny_models import make, padded_batch
from turbotrain.backends.xla.batches import (
    KEPT,
    ROWS,
    BatchLayout,
    pad_batch,
    step_arrays,
)
from turbotrain.passes.label_sparsity import apply_label_sparsity


def layout(**overrides) -> BatchLayout:
    return BatchLayout(**{"rows": 8, "devices": 4, "pad_token_id": 0, **overrides})


def test_length_buckets_are_powers_of_two_from_16_unless_given():
    assert [layout().bucket_length(n) for n in (1, 16, 17, 33, 100)] == [16, 16, 32, 64, 128]
    given = layout(length_buckets=(24, 40))
    assert [given.bucket_length(n) for n in (3, 24, 25, 41)] == [24, 24, 40, 64]


def test_kept_rows_pad_to_a_multiple_of_an_eighth_of_the_batch_and_of_the_devices():
    unit = 8 * 32 // 8
    assert layout().kept_row_count(1, 32) == unit
    assert layout().kept_row_count(unit + 1, 32) == 2 * unit
    assert layout(rows=3, devices=4).kept_row_count(1, 16) % 4 == 0


@pytest.mark.parametrize("family", ["roberta", "gpt2"])
def test_padding_rows_and_length_keeps_loss_and_gradients(family):
    model = make(family, dropout=False).train()
    pad = model.config.pad_token_id
    batch = padded_batch([13, 5, 9], pad_token_id=pad)
    expected_loss, expected_grads = loss_and_grads(model, batch)
    padded = pad_batch(batch, layout(pad_token_id=pad), length=16)
    assert padded["input_ids"].shape == (8, 16) and padded["labels"][3:].eq(-100).all()
    assert_same((expected_loss, expected_grads), loss_and_grads(model, padded))


@pytest.mark.parametrize("family", ["roberta", "gpt2"])
def test_static_kept_rows_give_the_dense_loss(family):
    model = make(family, dropout=False).train()
    pad = model.config.pad_token_id
    batch = padded_batch([13, 5, 9], pad_token_id=pad)
    expected = model(**batch).loss
    installed = apply_label_sparsity(model)
    arrays = step_arrays([batch], layout(pad_token_id=pad, sparsity_causal=installed.head.causal))
    assert arrays[ROWS].shape[1] % 4 == 0 and arrays[ROWS].shape == arrays[KEPT].shape
    inputs = {name: torch.from_numpy(value[0]).long() for name, value in arrays.items()}
    rows, kept = inputs.pop(ROWS).int(), inputs.pop(KEPT)
    with installed.static_rows(rows, kept):
        loss = model(**inputs).loss
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)


def test_micro_batches_are_stacked_at_one_length():
    arrays = step_arrays([padded_batch([3, 20]), padded_batch([7])], layout())
    assert arrays["input_ids"].shape == (2, 8, 32) and arrays["input_ids"].dtype.name == "int32"


def test_a_short_batch_with_float_labels_is_refused():
    batch = {"input_ids": torch.ones(3, 4, dtype=torch.long), "labels": torch.ones(3)}
    with pytest.raises(ValueError, match="dataloader_drop_last"):
        pad_batch(batch, layout(), length=16)
