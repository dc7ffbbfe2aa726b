"""Packed attention's kernels and the measured choice between them (passes/padding_free/attention_kernels.py,
kernel_choice.py): every kernel this machine runs matches padded stock (loss and every gradient, fp32 tight), at
a published model's attention layout too; the choice is the fastest exact kernel by a margin, measured once per
kind of call and cached on disk; a kernel that disagrees or raises is dropped with a warning; the summary names
what was chosen."""

from __future__ import annotations

import json

import pytest
import torch

from tests.parity import assert_same, loss_and_grads
from tests.passes.test_packed_attention import OLD_RELEASE, _batch, _packed_model
from turbotrain.passes.padding_free import attention_kernels, kernel_choice
from turbotrain.passes.padding_free.attention_kernels import PackedCall, per_length, row_mask
from turbotrain.passes.padding_free.packed_sequences import sequence_metadata
from turbotrain.utils.warnings import TurbotrainWarning

pytestmark = pytest.mark.skipif(OLD_RELEASE, reason="no packed attention on this Transformers release")


@pytest.fixture(autouse=True)
def fresh_choices(monkeypatch, tmp_path):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel_choice, "CHOSEN", {})
    monkeypatch.setattr(kernel_choice, "USED", {})
    monkeypatch.setattr(kernel_choice, "_failed", {})
    monkeypatch.setattr(kernel_choice, "_confirmed", set())
    # the row mask tried on these calls as on an accelerator (up to 16x the sequences' own work; the CPU's 2x
    # bound has its own test)
    monkeypatch.setitem(attention_kernels.ROW_MASK_MAX_WASTE, "cpu", 16.0)


def _packed_pair(family, task="lm"):
    stock, model, report = _packed_model(family, task)
    padded = _batch(model, task)
    return stock, model, report, padded, report.collator(lambda features: features)(dict(padded))


@pytest.mark.parametrize("kernel", ["row_mask", "per_length"])
@pytest.mark.parametrize("family,task", [("bert", "lm"), ("gpt2", "lm"), ("qwen2", "lm"), ("mistral", "tok"),
                                         ("gemma2", "lm")])  # fmt: skip
def test_each_cpu_kernel_matches_padded_stock(family, task, kernel, monkeypatch):
    # bidirectional, causal, GQA 4:1, a window of 8 under lengths up to 40, eager soft-capped (Gemma-2)
    stock, model, report, padded, packed = _packed_pair(family, task)
    called = []
    real = kernel_choice.KERNELS[kernel]
    monkeypatch.setitem(kernel_choice.KERNELS, kernel, lambda call: called.append(1) or real(call))
    with kernel_choice.forced(kernel):
        got = loss_and_grads(model, packed)
    assert called  # the kernel itself took the calls
    assert_same(loss_and_grads(stock, padded), got, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", ["qwen2", "mistral"])  # causal GQA 4:1; a window of 8 under lengths up to 40
def test_row_mask_gives_what_stock_gives_with_transformers_flattening_collator(family):
    """`row_mask` stands for stock + DataCollatorWithFlattening in the choice (kernel_choice.STOCK_PATH): through
    turbotrain's packing it gives the loss and every gradient stock gives on the same sequences flattened."""
    from transformers import DataCollatorWithFlattening

    stock, model, report, padded, packed = _packed_pair(family)
    rows = zip(padded["input_ids"], padded["labels"], padded["attention_mask"].bool())
    features = [{"input_ids": ids[real].tolist(), "labels": labels[real].tolist()} for ids, labels, real in rows]
    flattened = DataCollatorWithFlattening(return_tensors="pt")(features)
    assert flattened["input_ids"].shape[0] == 1 and "attention_mask" not in flattened
    with kernel_choice.forced("row_mask"):
        got = loss_and_grads(model, packed)
    assert kernel_choice.USED.get("row_mask")
    # as Trainer runs it: `use_cache` off (Trainer sets the config's from its arguments), else Transformers makes
    # a cache, skips its packed-sequence detection and attends across the flattened sequences
    assert_same(loss_and_grads(stock, flattened, use_cache=False), got, rtol=1e-5, atol=1e-6)


def _published_call(stock, original="sdpa", window=None, lengths=(300, 1, 77, 128, 5, 64, 64, 2), capacity=384,
                    causal=True):  # fmt: skip
    """One attention call at Qwen2.5-0.5B's layout (14 query heads, 2 KV heads of 64: its published config),
    its sequences packed into two rows of `capacity`, as padding-free hands them to the attention function."""
    generator = torch.Generator().manual_seed(0)
    segments, starts, position = torch.full((2, capacity), -1), [], [0, 0]
    for index, length in enumerate(lengths):
        row = 0 if position[0] + length <= capacity else 1
        segments[row, position[row] : position[row] + length] = index
        starts.append(row * capacity + position[row])
        position[row] += length
    for row in range(2):  # each tail a segment of its own
        segments[row, position[row] :] = 100 + row
    meta = sequence_metadata(segments, torch.tensor(lengths), torch.tensor(starts))
    q, k, v = (torch.randn(2, h, capacity, 64, generator=generator) for h in (14, 2, 2))
    kwargs = {**{key: value for key, value in meta.items() if key != "turbotrain_packed_sequences"}, "scaling": 0.125}
    if window is not None:
        kwargs["sliding_window"] = window
    module = torch.nn.Module()
    module.num_key_value_groups = 7
    return PackedCall(stock, original, module, q, k, v, meta["turbotrain_packed_sequences"], causal, kwargs)


@pytest.mark.parametrize("original,window", [("sdpa", None), ("sdpa", 100), ("eager", None)])
def test_row_mask_and_per_length_agree_at_a_published_layout(original, window):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.models.qwen2.modeling_qwen2 import eager_attention_forward

    stock = sdpa_attention_forward if original == "sdpa" else eager_attention_forward
    call = _published_call(stock, original, window)
    results = [kernel_choice._run_once(call, name, training=True) for name in ("per_length", "row_mask")]
    for expected, got in zip(*results):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    tails = torch.ones(2 * 384, dtype=torch.bool).index_fill_(0, call.sequences.order, False)
    assert tails.any() and results[1][0][tails].abs().max() == 0  # each row's tail: zeros


def _timed(monkeypatch, milliseconds: dict[str, float]) -> list[str]:
    measured = []

    def fake(call, name, training):
        measured.append(name)
        return milliseconds[name] / 1e3

    monkeypatch.setattr(kernel_choice, "_median_seconds", fake)
    return measured


def _sdpa_call(**options):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return _published_call(sdpa_attention_forward, **options)


@pytest.mark.parametrize(
    "milliseconds,expected",
    [
        ({"per_length": 10.0, "row_mask": 5.0}, "row_mask"),  # twice as fast: chosen
        ({"per_length": 10.0, "row_mask": 9.5}, "row_mask"),  # within the margin, but never slower than stock's way
        ({"per_length": 9.5, "row_mask": 10.0}, "per_length"),
        ({"per_length": 3.0, "row_mask": 5.0}, "per_length"),
    ],
)
def test_the_fastest_exact_kernel_is_chosen_once_and_cached(monkeypatch, tmp_path, milliseconds, expected):
    measured = _timed(monkeypatch, milliseconds)
    call = _sdpa_call()
    assert kernel_choice.choose(call) == expected and sorted(measured) == ["per_length", "row_mask"]
    assert kernel_choice.choose(call) == expected and len(measured) == 2  # remembered: not measured again
    table = json.loads((tmp_path / kernel_choice.CACHE_FILE).read_text())
    (entry,) = table.values()
    assert entry["kernel"] == expected and entry["kind"]["heads"] == 14 and entry["kind"]["kv_heads"] == 2
    monkeypatch.setattr(kernel_choice, "CHOSEN", {})  # a later run on this machine: read from the cache
    assert kernel_choice.choose(call) == expected and len(measured) == 2


def test_a_cached_choice_of_an_earlier_rule_is_chosen_again_from_its_timings(monkeypatch):
    """An entry an earlier release wrote (its 10% margin kept per_length 5% slower than the row mask) is read by
    today's rule from its own timings, without measuring again."""
    from turbotrain.utils.cache import write_entry

    measured = _timed(monkeypatch, {"per_length": 10.0, "row_mask": 9.5})
    call = _sdpa_call()
    entry = {"kernel": "per_length", "ms": {"per_length": 10.0, "row_mask": 9.5}, "kind": {}}
    write_entry(kernel_choice.CACHE_FILE, kernel_choice.CallKind.of(call).key(), entry)
    assert kernel_choice.choose(call) == "row_mask" and measured == []


def test_another_kind_of_call_is_measured_on_its_own(monkeypatch):
    measured = _timed(monkeypatch, {"per_length": 10.0, "row_mask": 5.0})
    kernel_choice.choose(_sdpa_call())
    kernel_choice.choose(_sdpa_call(window=100))  # a window: another kind
    kernel_choice.choose(_sdpa_call(lengths=(200, 180, 150, 190)))  # longer sequences: another bucket
    assert len(measured) == 6 and len(kernel_choice.CHOSEN) == 3


def test_a_kernel_that_disagrees_with_the_models_attention_is_never_chosen(monkeypatch):
    _timed(monkeypatch, {"per_length": 10.0, "row_mask": 1.0})
    monkeypatch.setitem(kernel_choice.KERNELS, "row_mask", lambda call: row_mask(call) * 1.01)
    with pytest.warns(TurbotrainWarning, match="row_mask kernel disagrees with the model's own attention"):
        assert kernel_choice.choose(_sdpa_call()) == "per_length"


def test_a_kernel_that_raises_is_dropped_and_training_goes_on_exactly(monkeypatch):
    def broken(call):
        raise RuntimeError("no such kernel on this build")

    stock, model, report, padded, packed = _packed_pair("llama")
    monkeypatch.setitem(kernel_choice.KERNELS, "row_mask", broken)
    with pytest.warns(TurbotrainWarning, match="row_mask kernel failed"), kernel_choice.forced("row_mask"):
        got = loss_and_grads(model, packed)
    assert "row_mask" in kernel_choice._failed
    assert_same(loss_and_grads(stock, padded), got, rtol=1e-5, atol=1e-6)


def test_a_forced_kernel_that_cannot_take_the_call_leaves_it_to_per_length(monkeypatch):
    calls = []
    monkeypatch.setitem(kernel_choice.KERNELS, "per_length", lambda call: calls.append(1) or per_length(call))
    with kernel_choice.forced("torch_varlen"):  # CPU, fp32: no varlen kernel
        kernel_choice.attend(_sdpa_call())
    assert calls == [1]
    with pytest.raises(ValueError, match="no packed attention kernel 'sdpa'"):
        kernel_choice.forced("sdpa").__enter__()


def test_the_row_mask_is_tried_only_where_its_extra_work_is_bounded(monkeypatch):
    call = _sdpa_call()  # 2 rows of 384 for sequences whose own work is 41% of R * C^2
    monkeypatch.setitem(attention_kernels.ROW_MASK_MAX_WASTE, "cpu", 2.0)
    assert attention_kernels.applicable(call) == ["per_length"]  # 2.4x the work on a CPU: not even measured
    monkeypatch.setitem(attention_kernels.ROW_MASK_MAX_WASTE, "cpu", 3.0)
    assert attention_kernels.applicable(call) == ["per_length", "row_mask"]
    many_short = _sdpa_call(lengths=(3,) * 100)  # 300 tokens, each row 384 wide: 500x the work
    assert "row_mask" not in attention_kernels.applicable(many_short)


def test_the_varlen_kernels_take_only_half_precision_cuda_calls():
    call = _sdpa_call()
    assert attention_kernels.applicable(call) == ["per_length", "row_mask"]  # CPU, fp32
    assert attention_kernels.applicable(call, failed={"row_mask"}) == ["per_length"]


def test_no_measurement_under_gradient_checkpointings_hooks():
    # non-reentrant checkpointing counts the tensors its forward saves: no measurement under its hooks, later calls measure
    stock, model, report = _packed_model("qwen2", "lm")
    for each in (stock, model):
        each.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    padded = _batch(model, "lm", lengths=[33, 2, 17, 5, 9, 1])  # lengths the install check did not measure
    packed = report.collator(lambda features: features)(dict(padded))
    count = len(kernel_choice.CHOSEN)
    got = loss_and_grads(model, packed)
    assert len(kernel_choice.CHOSEN) == count  # under its hooks: the first kernel, unmeasured
    assert_same(loss_and_grads(stock, padded), got, rtol=1e-5, atol=1e-6)
    model.gradient_checkpointing_disable()
    loss_and_grads(model, packed)
    assert len(kernel_choice.CHOSEN) > count  # outside them the kind is measured


def test_the_summary_names_the_kernels_that_took_training_calls(monkeypatch):
    _timed(monkeypatch, {"per_length": 10.0, "row_mask": 1.0})
    stock, model, report, padded, packed = _packed_pair("llama")
    assert report.padding_free.label == "padding_free"  # the install check's calls are not training calls
    model.eval()
    model(**packed)
    assert report.padding_free.label == "padding_free"
    model.train()
    model(**packed).loss.backward()
    assert report.padding_free.label == "padding_free (attention: row_mask)"
