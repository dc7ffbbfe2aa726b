"""Packed attention through flex attention (passes/padding_free/flex_kernel.py) on the CPU, where torch runs it
forward only: the same outputs as the model's own attention per sequence at Qwen2.5-0.5B's layout (causal,
bidirectional, a window shorter than the sequences, a soft-cap, rows not a multiple of the block, a full row),
padded stock's losses for whole models, block classes checked pair by pair against a dense mask, and the policy:
measured on accelerators where no varlen kernel takes the call, forced on the CPU only without gradients, a cached
choice run once before a process trusts it. Training on CUDA: test_packed_attention_cuda.py."""

from __future__ import annotations

import pytest
import torch

from tests.passes.test_kernel_choice import _packed_pair, _published_call, fresh_choices  # noqa: F401 (autouse)
from tests.passes.test_packed_attention import OLD_RELEASE
from turbotrain.passes.padding_free import attention_kernels, flex_kernel, kernel_choice
from turbotrain.passes.padding_free.packed_sequences import CU_SEQ_LENS

pytestmark = [
    pytest.mark.skipif(OLD_RELEASE, reason="no packed attention on this Transformers release"),
    # the compiled kernel, which honours the block mask's sparsity (torch's uncompiled fallback evaluates every pair)
    pytest.mark.filterwarnings("error:flex_attention called without torch.compile"),
]


@pytest.fixture(autouse=True)
def room_for_every_shape(monkeypatch):
    """Static shapes on the CPU compile once per shape; this file's dozen would pass Dynamo's limit of 8 and run
    uncompiled (users on the CPU force it on one shape at a time). Torch warns of an uncompiled call once a
    process: forgotten here, so that every test's first such call is an error."""
    from torch.nn.attention import flex_attention

    monkeypatch.setattr(flex_attention, "_WARNINGS_SHOWN", set(), raising=False)
    with torch._dynamo.config.patch(recompile_limit=64):
        yield


def _stock(original="sdpa", family="qwen2"):
    if original == "sdpa":
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward
    module = __import__(f"transformers.models.{family}.modeling_{family}", fromlist=["eager_attention_forward"])
    return module.eager_attention_forward


@pytest.mark.parametrize(
    "options",
    [
        {},  # causal, two rows of 384 (multiples of the block)
        {"capacity": 350},  # rows that end inside a block
        {"capacity": 300, "lengths": (200, 100, 50, 3, 97)},  # a row filled to the last token: no tail
        {"causal": False, "capacity": 350},  # bidirectional
        {"window": 100},  # a window shorter than the longest sequence
        {"causal": False, "window": 150, "capacity": 350},
        {"original": "eager", "softcap": 30.0},  # Gemma-2's eager attention, soft-capped
    ],
)
def test_flex_matches_the_models_attention_per_sequence(options):
    options = dict(options)
    softcap = options.pop("softcap", None)
    original = options.setdefault("original", "sdpa")
    call = _published_call(_stock(original, "gemma2" if softcap else "qwen2"), **options)
    if softcap:
        call.kwargs["softcap"] = softcap
    with torch.no_grad():
        expected, got = attention_kernels.per_length(call), flex_kernel.flex(call)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    tails = torch.ones(got.shape[0], dtype=torch.bool).index_fill_(0, call.sequences.order, False)
    assert got[tails].abs().sum() == 0  # each row's tail: zeros


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 1, 100, 128, 129, 255, 256, 300])
def test_block_classes_hold_every_allowed_pair_and_full_blocks_only_allowed_ones(causal, window):
    generator = torch.Generator().manual_seed(window or 0)
    for capacity in (1, 127, 128, 129, 300, 384):
        lengths = torch.randint(1, 260, (12,), generator=generator).tolist()
        segments, real, position = (
            torch.empty(2, capacity, dtype=torch.long),
            torch.zeros(2, capacity, dtype=torch.bool),
            0,
        )
        for row in range(2):
            filled, segment = 0, 0
            for length in lengths[row * 6 : row * 6 + 6]:
                take = min(length, capacity - filled)
                segments[row, filled : filled + take] = position + segment
                real[row, filled : filled + take] = take > 0
                filled, segment = filled + take, segment + 1
            segments[row, filled:] = position + segment  # the tail (none in a full row)
            position += segment + 1
        padded_segments, padded_real = _padded(segments, real)
        meets, full = flex_kernel.block_classes(padded_segments, padded_real, causal, window)
        distance = torch.arange(capacity)[:, None] - torch.arange(capacity)
        allowed = (segments[:, :, None] == segments[:, None, :]) & real[:, :, None]  # pairs a real query may meet
        if causal:
            allowed &= distance >= 0
        if window is not None:
            allowed &= distance.abs() < window
        blocks = -(-capacity // 128)
        dense = torch.zeros(2, blocks * 128, blocks * 128, dtype=torch.bool)
        dense[:, :capacity, :capacity] = allowed
        per_block = dense.view(2, blocks, 128, blocks, 128)
        assert not (per_block.any(4).any(2) & ~meets).any(), (capacity, lengths)  # no allowed pair skipped
        inside = torch.zeros(blocks * 128, dtype=torch.bool)
        inside[:capacity] = True
        every = (dense | ~(inside[:, None] & inside[None])).view(2, blocks, 128, blocks, 128).all(4).all(2)
        assert not (full & ~every).any(), (capacity, lengths)  # a full block holds only allowed pairs


def _padded(segments, real):
    extra = -segments.shape[1] % 128
    beyond = segments.max() + 1
    return (torch.cat([segments, beyond.expand(2, extra)], 1), torch.cat([real, real.new_zeros(2, extra)], 1))


def test_the_block_mask_skips_blocks_between_sequences_and_fills_those_inside_one():
    call = _published_call(_stock(), lengths=(300, 1, 77, 128, 5, 64, 64, 2), capacity=512)
    mask = flex_kernel._block_mask(call)
    # row 0 holds 300 + 1 + 77 + 128 + 5 tokens and a 1-token tail: blocks 0-1 lie inside the 300-token sequence
    assert mask.full_kv_num_blocks[0, 0, 1] == 1  # query block 1 sees key block 0 whole
    assert mask.kv_num_blocks[0, 0, 2] == 3 and mask.full_kv_num_blocks[0, 0, 2] == 0  # 300 ends in block 2: partial
    assert mask.kv_num_blocks[1, 0, 3] == 0 and mask.full_kv_num_blocks[1, 0, 3] == 0  # row 1's last block: tail only
    assert flex_kernel._block_mask(call) is mask  # every layer of the batch shares it
    call.kwargs[CU_SEQ_LENS[0]] = call.kwargs[CU_SEQ_LENS[0]].clone()  # another batch
    assert flex_kernel._block_mask(call) is not mask


@pytest.mark.parametrize("family,task", [("bert", "lm"), ("qwen2", "lm"), ("mistral", "tok"), ("gemma2", "lm")])
def test_flex_forward_gives_padded_stocks_loss(family, task, monkeypatch):
    # bidirectional, GQA 4:1, a window of 8 under lengths up to 40, eager soft-capped: forward (no CPU backward)
    stock, model, report, padded, packed = _packed_pair(family, task)
    called = []

    def recorded(call):
        out = flex_kernel.flex(call)
        called.append(1)  # after it returned: a kernel that raised is dropped and per length answers
        return out

    monkeypatch.setitem(kernel_choice.KERNELS, "flex", recorded)
    with torch.no_grad(), kernel_choice.forced("flex"):
        got = model(**packed).loss
    assert called and "flex" not in kernel_choice._failed
    torch.testing.assert_close(got, stock(**padded).loss, rtol=1e-5, atol=1e-6)


def test_flex_is_measured_on_accelerators_where_no_varlen_kernel_takes_the_call(monkeypatch):
    call = _published_call(_stock())
    assert "flex" not in attention_kernels.applicable(call)  # the CPU: static shapes, a compile per batch shape
    assert "flex" in attention_kernels.forcible(call)
    grad = call.with_tensors(*(x.requires_grad_() for x in (call.query, call.key, call.value)))
    assert "flex" not in attention_kernels.forcible(grad)  # no CPU backward
    meta = call.with_tensors(*(x.to("meta") for x in (call.query, call.key, call.value)))
    assert attention_kernels.applicable(meta)[:2] == ["per_length", "flex"]  # another device: a measured candidate
    monkeypatch.setattr(attention_kernels, "_varlen_kernels", lambda call: ["torch_varlen"])
    assert "flex" not in attention_kernels.applicable(meta)  # a one-launch kernel that needs no compile takes it
    monkeypatch.undo()
    meta.kwargs["dropout"] = 0.1
    assert "flex" not in attention_kernels.applicable(meta)  # flex attention cannot drop out


def test_a_cached_flex_choice_runs_once_before_a_process_trusts_it(monkeypatch):
    from turbotrain.utils.cache import write_entry

    calls = []

    def broken(call):
        raise RuntimeError("no Triton for this head size")

    monkeypatch.setattr(kernel_choice, "applicable", lambda call, failed=frozenset(): [
        name for name in ("per_length", "flex") if name not in failed])  # fmt: skip  # as on an accelerator
    call = _published_call(_stock())
    write_entry(kernel_choice.CACHE_FILE, kernel_choice.CallKind.of(call).key(), {"kernel": "flex"})
    monkeypatch.setitem(kernel_choice.KERNELS, "flex", broken)
    with pytest.warns(Warning, match="flex kernel failed"):
        assert kernel_choice.choose(call) == "per_length"  # dropped at once, not in the step's backward
    monkeypatch.setattr(kernel_choice, "_failed", {})  # another process, where it compiles
    monkeypatch.setattr(kernel_choice, "CHOSEN", {})
    write_entry(kernel_choice.CACHE_FILE, kernel_choice.CallKind.of(call).key(), {"kernel": "flex"})
    monkeypatch.setitem(
        kernel_choice.KERNELS, "flex", lambda call: calls.append(1) or attention_kernels.per_length(call)
    )
    assert kernel_choice.choose(call) == "flex" and len(calls) == 1
    kernel_choice.CHOSEN.clear()
    assert kernel_choice.choose(call) == "flex" and len(calls) == 1  # confirmed once a process
