"""The fused kernels' calls, checked on the CPU (passes/padding_free/attention_kernels.py, kernel_choice.py).

torch's `varlen_attn` and flash-attn's `flash_attn_varlen_func` run on CUDA only, so their CUDA tests
(test_packed_attention_cuda.py) never run here. What turbotrain does around them does: these tests put a reference
of each kernel in its place (one SDPA call per segment of `cu_seq_lens`, refusing mixed dtypes as the CUDA kernels
do) and check the wrappers against `per_length`, the model's own attention, as the measured choice does: every
output, each row's tail (which the kernels see as one more sequence) included, and every gradient. Also: under
autocast the fused kernels get one dtype (rotary models hand fp32 queries and keys beside a bf16 value); kernels are
compared with dropout off and timed with it; a kernel that raised is dropped only for its device type and dtype.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

import pytest
import torch
import torch.nn.functional as F

from tests.passes.test_kernel_choice import (
    _published_call,
    _sdpa_call,
    fresh_choices,  # noqa: F401  (autouse: choices, failures, cache per test)
)
from tests.passes.test_packed_attention import OLD_RELEASE
from turbotrain.passes.padding_free import attention_kernels, kernel_choice
from turbotrain.utils.warnings import TurbotrainWarning

pytestmark = pytest.mark.skipif(OLD_RELEASE, reason="no packed attention on this Transformers release")


def reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1), enable_gqa=False):
    """torch's varlen_attn as its docs state it: [T, H, D] tokens, segments by int32 `cu_q`, a key k meets a query
    q of its segment where q - k <= left and k - q <= right (-1: unbounded), in one dtype."""
    assert q.dtype == k.dtype == v.dtype, f"varlen_attn takes one dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
    assert cu_q.dtype == torch.int32 and isinstance(max_q, int) and torch.equal(cu_q, cu_k)
    assert max_q == max(b - a for a, b in zip(cu_q[:-1].tolist(), cu_q[1:].tolist()))
    if k.shape[1] != q.shape[1]:
        assert enable_gqa, "GQA needs enable_gqa=True"
        k, v = (x.repeat_interleave(q.shape[1] // x.shape[1], dim=1) for x in (k, v))
    left, right = window_size
    pieces = []
    for start, end in zip(cu_q[:-1].tolist(), cu_q[1:].tolist()):
        distance = torch.arange(end - start)[:, None] - torch.arange(end - start)  # q - k
        allowed = torch.ones_like(distance, dtype=torch.bool)
        if left >= 0:
            allowed &= distance <= left
        if right >= 0:
            allowed &= -distance <= right
        part = [x[start:end].transpose(0, 1) for x in (q, k, v)]
        pieces.append(F.scaled_dot_product_attention(*part, attn_mask=allowed, scale=scale).transpose(0, 1))
    return torch.cat(pieces)


def reference_flash(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0):  # fmt: skip
    """flash-attn's flash_attn_varlen_func on the same reference (causal: no key after its query)."""
    assert dropout_p == 0.0 and softcap == 0.0
    left, right = window_size
    return reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale=softmax_scale,
                            window_size=(left, 0 if causal else right), enable_gqa=True)  # fmt: skip


@pytest.fixture
def cpu_varlen(monkeypatch):
    """Both varlen kernels, as references, where attention_kernels imports them; what is cached of whether
    flash-attn is installed (and its version, in the kinds' keys) is forgotten before and after."""
    import torch.nn.attention.varlen as varlen

    monkeypatch.setattr(varlen, "varlen_attn", reference_varlen)
    flash = types.ModuleType("flash_attn")
    flash.__spec__ = importlib.machinery.ModuleSpec("flash_attn", None)
    flash.flash_attn_varlen_func = reference_flash
    monkeypatch.setitem(sys.modules, "flash_attn", flash)
    for cached in (attention_kernels.installed, kernel_choice._versions):
        cached.cache_clear()
    yield
    for cached in (attention_kernels.installed, kernel_choice._versions):
        cached.cache_clear()


@pytest.mark.parametrize("kernel", ["torch_varlen", "flash_attn"])
@pytest.mark.parametrize("window,causal", [(None, True), (100, True), (None, False), (50, False)])
def test_each_varlen_wrapper_matches_per_length_tails_and_gradients_included(cpu_varlen, kernel, window, causal):
    # Qwen2.5-0.5B's layout (14 query heads, 2 KV heads of 64), lengths 1-300 in two rows of 384, each with a tail
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    call = _published_call(sdpa_attention_forward, window=window, causal=causal)
    expected = kernel_choice._run_once(call, "per_length", training=True)
    got = kernel_choice._run_once(call, kernel, training=True)
    tails = torch.ones(2 * 384, dtype=torch.bool).index_fill_(0, call.sequences.order, False)
    assert tails.any() and got[0][tails].abs().max() == 0  # the tails attended each other inside the kernel
    for name, a, b in zip(("output", "grad query", "grad key", "grad value"), got, expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
    assert kernel_choice._agrees(got, expected, call.compute_dtype)  # the measured choice keeps it


def test_under_autocast_the_fused_kernels_get_one_dtype_and_are_judged_at_its_tolerance(cpu_varlen, monkeypatch):
    """bf16=True with fp32 weights: RoPE multiplies the bf16 projections by fp32 cos/sin, so queries and keys reach
    the attention function in fp32 beside a bf16 value; the model's own SDPA is cast by autocast, a fused kernel
    would refuse the mix (or, judged at fp32's 1e-4, disagree with per_length's bf16)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    call = _published_call(sdpa_attention_forward)
    call = call.with_tensors(call.query, call.key, call.value.bfloat16())
    monkeypatch.setattr(kernel_choice, "_median_seconds", lambda call, name, training: 1e-3)
    assert call.compute_dtype == torch.float32  # no autocast: the query's
    with torch.autocast("cpu", torch.bfloat16):
        assert call.compute_dtype == torch.bfloat16
        assert {x.dtype for x in call.in_compute_dtype()} == {torch.bfloat16}
        assert kernel_choice.CallKind.of(call).dtype == "bfloat16"
        timings = kernel_choice.timed_kernels(call, ["per_length", "torch_varlen", "flash_attn"], training=True)
    assert set(timings) == {"per_length", "torch_varlen", "flash_attn"} and not kernel_choice._failed


def test_kernels_are_compared_without_dropout_and_timed_with_it(monkeypatch):
    """No two kernels draw the same dropout mask: compared with it, every kernel but per_length would disagree
    (BERT and RoBERTa train with attention dropout 0.1)."""
    call = _sdpa_call(causal=False)
    call.kwargs["dropout"] = 0.1
    timed = []
    monkeypatch.setattr(kernel_choice, "_median_seconds", lambda c, name, training: timed.append(c) or 1e-3)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        timings = kernel_choice.timed_kernels(call, ["per_length", "row_mask"], training=True)
    assert set(timings) == {"per_length", "row_mask"}
    assert [c.kwargs["dropout"] for c in timed] == [0.1, 0.1]  # timed as the model runs it


def test_with_dropout_the_kernels_do_draw_differently(monkeypatch):
    """The premise of the test above: with dropout the two kernels' outputs differ, so comparing them there says
    nothing about their formula."""
    call = _sdpa_call(causal=False)
    call.kwargs["dropout"] = 0.1
    a, b = (kernel_choice._run_once(call, name, training=False)[0] for name in ("per_length", "row_mask"))
    assert not kernel_choice._agrees([a], [b], torch.float32)


def test_a_kernel_that_raised_is_dropped_for_its_device_and_dtype_only():
    fp32 = _sdpa_call()
    bf16 = fp32.with_tensors(*(x.bfloat16() for x in (fp32.query, fp32.key, fp32.value)))
    with pytest.warns(TurbotrainWarning, match="row_mask kernel failed .* its cpu float32 calls"):
        kernel_choice._drop("row_mask", RuntimeError("fp32 only"), fp32)
    assert kernel_choice.failed_for(fp32) == {"row_mask"}
    assert kernel_choice.failed_for(bf16) == set()
    assert "row_mask" in kernel_choice.KERNELS and "row_mask" in kernel_choice._failed


@pytest.mark.parametrize(
    "timings,names,expected",
    [
        ({"per_length": 10.0, "row_mask": 2.0}, ["per_length"], "per_length"),  # timed, but not the choice's to take
        ({"per_length": 10.0, "row_mask": 2.0}, ["per_length", "row_mask"], "row_mask"),
        ({"torch_varlen": 1.0, "per_length": 1.05}, ["torch_varlen", "per_length"], "torch_varlen"),
        ({"torch_varlen": 1.0, "per_length": 0.5}, ["torch_varlen", "per_length"], "per_length"),
        ({"per_length": 1.0}, ["torch_varlen", "per_length"], "per_length"),  # the preferred one disagreed
        # the margin keeps the preferred kernel against turbotrain's own, never against stock + flattening's way:
        (
            {"torch_varlen": 1.0, "per_length": 0.95, "row_mask": 1.2},
            ["torch_varlen", "per_length", "row_mask"],
            "torch_varlen",
        ),
        (
            {"torch_varlen": 1.0, "per_length": 0.95, "row_mask": 0.98},
            ["torch_varlen", "per_length", "row_mask"],
            "per_length",
        ),
        ({"torch_varlen": 1.0, "row_mask": 0.99}, ["torch_varlen", "row_mask"], "row_mask"),
    ],
)
def test_the_choice_rule_on_given_timings(timings, names, expected):
    assert kernel_choice.fastest_exact(timings, names) == expected


def test_in_bf16_a_kernel_that_lets_in_keys_stock_masks_still_disagrees():
    """The half-precision bound is loose enough for rounding (row_mask against per_length in bf16: several bf16
    steps apart elementwise) and tight enough for a wrong key set: a kernel that forgets causality is dropped."""
    import dataclasses

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    call = _published_call(sdpa_attention_forward)
    call = call.with_tensors(*(x.bfloat16() for x in (call.query, call.key, call.value)))
    expected = kernel_choice._run_once(call, "per_length", training=True)
    assert kernel_choice._agrees(kernel_choice._run_once(call, "row_mask", training=True), expected, torch.bfloat16)
    kernel_choice.KERNELS["not_causal"] = lambda c: kernel_choice.KERNELS["per_length"](
        dataclasses.replace(c, causal=False)
    )
    try:
        wrong = kernel_choice._run_once(call, "not_causal", training=True)
    finally:
        del kernel_choice.KERNELS["not_causal"]
    assert not kernel_choice._agrees(wrong, expected, torch.bfloat16)


def test_measuring_leaves_the_runs_random_numbers_as_they_were():
    """The timing runs each kernel with the model's attention dropout: its draws must not move the run's (a
    reentrant checkpoint's recompute would draw other masks than its forward; a cached choice would give another
    run than a measured one)."""
    call = _sdpa_call(causal=False)
    call.kwargs["dropout"] = 0.1
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    timings = kernel_choice.timed_kernels(call, ["per_length", "row_mask"], training=True)
    assert set(timings) == {"per_length", "row_mask"}
    assert torch.equal(torch.rand(3), expected)


def test_a_flash_attn_that_does_not_import_is_left_out_not_raised(tmp_path, monkeypatch, caplog):
    # flash-attn built for another torch: its package is there, its import fails ("undefined symbol")
    package = tmp_path / "flash_attn"
    package.mkdir()
    (package / "__init__.py").write_text('raise ImportError("flash_attn_2_cuda.so: undefined symbol: _ZN3c10")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "flash_attn", raising=False)
    for cached in (attention_kernels.installed, kernel_choice._versions):
        cached.cache_clear()
    try:
        assert not attention_kernels.installed("flash_attn")
        assert "flash-attn none" in kernel_choice._versions()
    finally:
        for cached in (attention_kernels.installed, kernel_choice._versions):
            cached.cache_clear()
    assert "installed but does not import (ImportError: flash_attn_2_cuda.so: undefined symbol" in caplog.text
