"""What a forward leaves open ends with it, even when it raises: a packed forward's mark (masks of that model are
None meanwhile) belongs to the thread that opened it, and `OptimizeReport.end_forward()` (TurboTrainer calls it
when a step raises) ends what a forward whose closing hook was skipped left open (torch runs no `always_call`
forward hook when a compiled forward raises), so that the next forward, padded, is stock's."""

from __future__ import annotations

import threading

import pytest
import torch

from tests.passes.test_packed_attention import OLD_RELEASE, _batch, _packed_model
from tests.tiny_models import make, padded_batch
from tests.trainer_helpers import COMMON, RightPaddingCollator, variable_length_dataset
from turbotrain import TurboTrainer, TurboTrainingArguments, optimize
from turbotrain.passes.label_sparsity import _ROWS_IN_USE, LabelSparsity
from turbotrain.passes.padding_free import PaddingFree
from turbotrain.passes.padding_free.packed_attention import packed_now

pytestmark = pytest.mark.skipif(OLD_RELEASE, reason="no packed attention before Transformers 5.24")


def test_threads_each_open_and_end_their_own_packed_forwards():
    # nn.DataParallel runs one replica a thread through the same hooks: the one that ends first must end its own
    _, model, report = _packed_model("bert", "lm")
    switch = report.padding_free.attention
    both_open, first_ended = threading.Barrier(2), threading.Event()
    seen, errors = {}, []

    def replica(name, ends_first):
        try:
            switch.mark_packed()
            seen[name, "open"] = (switch.open_forwards(), not packed_now(model.config))
            both_open.wait(timeout=10)
            if not ends_first:
                first_ended.wait(timeout=10)
            switch.unmark()
            seen[name, "ended"] = (switch.open_forwards(), not packed_now(model.config))
            if ends_first:
                first_ended.set()
        except Exception as error:  # noqa: BLE001  (the thread's error is the test's)
            errors.append(error)
            first_ended.set()

    threads = [threading.Thread(target=replica, args=(name, name == "a")) for name in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    for name in "ab":
        assert seen[name, "open"] == (1, False)  # its own forward open: no mask built
        assert seen[name, "ended"] == (0, True)


def test_a_forward_left_open_masks_nothing_once_the_report_ends_it():
    stock, model, report = _packed_model("bert", "lm")
    model.eval(), stock.eval()
    batch = _batch(model, "lm")
    switch = report.padding_free.attention
    with torch.no_grad():
        expected = stock(**batch).logits
        switch.mark_packed()  # a packed forward whose closing hook never ran
        unmasked = model(**batch).logits  # (this forward's own closing hook then ends the mark)
        switch.mark_packed()
        assert switch.open_forwards() == 1
        report.end_forward()
        assert switch.open_forwards() == 0
        after = model(**batch).logits
    assert not torch.allclose(unmasked, expected, atol=1e-3)  # left open, padded rows attend to their padding
    torch.testing.assert_close(after, expected, rtol=0, atol=0)


def test_label_sparsity_drops_the_rows_a_raised_forward_left():
    model = make("gpt2", task="lm", dropout=False)
    report = optimize(model, padding_free=False, chunked_cross_entropy="always")
    sparsity = report.label_sparsity
    sparsity._select_rows(model, (), padded_batch([9, 5, 7], task="lm", keep=0.5, seed=3, pad_token_id=0))
    assert sparsity._key in _ROWS_IN_USE and sparsity.chunked_head.call is not None
    report.end_forward()
    assert sparsity._key not in _ROWS_IN_USE and sparsity.chunked_head.call is None


def _skip_closing_hooks(model) -> int:
    """The passes' closing forward hooks do nothing, as when a compiled forward raises; how many there were."""
    closing = (PaddingFree._clear, LabelSparsity._clear_rows)
    found = [key for key, hook in model._forward_hooks.items() if getattr(hook, "__func__", None) in closing]
    for key in found:
        model._forward_hooks[key] = lambda module, args, output: None
    return len(found)


def _one_step_trainer(tmp_path) -> TurboTrainer:
    """A TurboTrainer of one step on a tiny GPT-2, padding-free and label sparsity installed."""
    args = TurboTrainingArguments(output_dir=str(tmp_path), **{**COMMON, "max_steps": 1})
    return TurboTrainer(
        model=make("gpt2", task="lm", dropout=False), args=args, train_dataset=variable_length_dataset(task="lm"),
        data_collator=RightPaddingCollator(0),
    )  # fmt: skip


def test_a_step_that_raises_leaves_no_pass_state_to_the_next(tmp_path):
    trainer = _one_step_trainer(tmp_path)
    report = trainer.turbo_report
    assert report.padding_free is not None and report.padding_free.attention is not None
    assert report.label_sparsity is not None
    assert _skip_closing_hooks(trainer.model) == 2

    def out_of_memory(module, args, output):  # after the forward: an out-of-memory in the step, say
        assert report.padding_free.attention.open_forwards() == 1  # the packed forward's mark, left open
        assert report.label_sparsity._key in _ROWS_IN_USE
        raise torch.OutOfMemoryError("the test's")

    trainer.model.register_forward_hook(out_of_memory)
    with pytest.raises(torch.OutOfMemoryError, match="the test's"):
        trainer.train()
    assert report.padding_free.attention.open_forwards() == 0
    assert report.label_sparsity._key not in _ROWS_IN_USE


def test_a_step_whose_passes_cannot_end_their_state_still_raises_its_own_error(tmp_path, monkeypatch, caplog):
    trainer = _one_step_trainer(tmp_path)
    ended = []

    def broken_end(self):
        ended.append(type(self).__name__)
        raise RuntimeError("the end's own failure")

    monkeypatch.setattr(LabelSparsity, "end_forward", broken_end)
    monkeypatch.setattr(PaddingFree, "end_forward", lambda self: ended.append("PaddingFree"))

    def out_of_memory(module, args, output):
        raise torch.OutOfMemoryError("the test's")

    trainer.model.register_forward_hook(out_of_memory)
    with pytest.raises(torch.OutOfMemoryError, match="the test's"):  # auto_find_batch_size's to catch, not another
        trainer.train()
    assert ended == ["LabelSparsity", "PaddingFree"]  # the pass after the failing one ended its state too
    assert "could not end its forward state: the end's own failure" in caplog.text
