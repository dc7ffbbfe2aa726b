"""Packed attention on CUDA (skipped without a GPU; for the prepared GPU check): the varlen kernels against
padded stock, windows and GQA through them, the per-length path in fp32, flash- and flex-attention models
packed with gradients, and a packed step without a host sync."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch

from tests.parity import assert_same, loss_and_grads
from tests.passes.test_packed_attention import _model
from tests.tiny_models import make, padded_batch
from turbotrain import optimize
from turbotrain.passes.padding_free import attention_kernels, kernel_choice

ON_CUDA = torch.cuda.is_available()  # hardware, not an optional dependency: no requires_ marker
pytestmark = pytest.mark.skipif(not ON_CUDA, reason="needs a CUDA GPU")
# lengths at 64 mod 128 among others (the cuDNN masked-SDPA regression's shape, pytorch#196678)
LENGTHS = [100, 64, 1, 3, 17, 64, 9, 70, 2]


@pytest.fixture(autouse=True)
def fresh_choices(monkeypatch, tmp_path):
    """Each test measures, counts and drops kernels on its own (a kernel dropped by one would leave the next forced
    test on per length)."""
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path))
    for name in ("CHOSEN", "USED"):
        monkeypatch.setattr(kernel_choice, name, {})
    monkeypatch.setattr(kernel_choice, "_failed", {})
    monkeypatch.setattr(kernel_choice, "_confirmed", set())


def _pair(family, task="lm", dtype=torch.float32, **options):
    model = _model(family, task).to("cuda", dtype)
    stock = copy.deepcopy(model)
    report = optimize(model, label_sparsity=False, embedding_grad=False, fused_activation=False, **options)
    padded = padded_batch(LENGTHS, task=task, keep=0.6, pad_token_id=model.config.pad_token_id or 0)
    if task == "tok":
        padded["labels"] = padded["labels"].clamp(max=model.config.num_labels - 1)
    packed = report.collator(lambda features: features)(dict(padded))
    move = lambda batch: {k: v.cuda() if torch.is_tensor(v) else v for k, v in batch.items()}  # noqa: E731
    return stock, model, report, move(padded), move(packed)


def _kernels_called(monkeypatch) -> list[str]:
    """The kernels that attend the model's packed calls (kernel_choice.attend's picks, not its measurements)."""
    chosen = []
    real = kernel_choice.choose
    monkeypatch.setattr(kernel_choice, "choose", lambda call: chosen.append(real(call)) or chosen[-1])
    return chosen


VARLEN = [
    name
    for name in ("flash_attn", "torch_varlen")
    if attention_kernels.installed(name.replace("torch_varlen", "torch.nn.attention.varlen"))
]


@pytest.mark.parametrize("kernel", ["flash_attn", "torch_varlen", "flex", "row_mask", "per_length"])
@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "qwen2", "mistral"])
def test_every_bf16_kernel_matches_padded_stock(family, kernel, monkeypatch):
    # bidirectional (BERT), causal, GQA 4:1 (Qwen2), a sliding window of 8 (Mistral: window_size (7, 0))
    if kernel == "flash_attn" and not attention_kernels.installed("flash_attn"):
        pytest.skip("flash-attn is not installed")
    stock, model, report, padded, packed = _pair(family, dtype=torch.bfloat16)
    assert report.padding_free.spec.mask == "sequences"
    called = []
    monkeypatch.setitem(kernel_choice.KERNELS, kernel, _recording(kernel_choice.KERNELS[kernel], called))
    with kernel_choice.forced(kernel):
        got = loss_and_grads(model, packed)
    config = model.config
    gqa = config.num_attention_heads != getattr(config, "num_key_value_heads", config.num_attention_heads)
    takes = kernel != "torch_varlen" or attention_kernels.torch_varlen_takes(2, 1 if gqa else 2)
    assert bool(called) == takes and kernel not in kernel_choice._failed, called
    assert_same(loss_and_grads(stock, padded), got, dtype=torch.bfloat16)


def _recording(kernel, called):
    def recorded(call):
        out = kernel(call)
        called.append(1)  # after it returned: a kernel that raised is dropped and another answers
        return out

    return recorded


@pytest.mark.parametrize("family", ["llama", "mistral", "gemma2"])
def test_the_measured_bf16_choice_matches_the_per_length_path(family, monkeypatch):
    # the same packed batch through the measured kernel and through the per-length path: close in bf16
    chosen = _kernels_called(monkeypatch)
    stock, model, report, padded, packed = _pair(family, dtype=torch.bfloat16)
    measured = loss_and_grads(model, packed)
    assert chosen and set(chosen) <= {*VARLEN, "flex", "row_mask", "per_length"}, chosen
    with kernel_choice.forced("per_length"):
        assert_same(loss_and_grads(model, packed), measured, dtype=torch.bfloat16)


@pytest.mark.parametrize("family,task", [("bert", "lm"), ("llama", "tok"), ("mistral", "lm"), ("gemma2", "lm")])
def test_fp32_on_cuda_takes_a_mask_kernel_exactly(family, task, monkeypatch):
    chosen = _kernels_called(monkeypatch)
    stock, model, report, padded, packed = _pair(family, task)
    got = loss_and_grads(model, packed)
    assert chosen and set(chosen) <= {"flex", "row_mask", "per_length"}, chosen  # varlen: half precision only
    assert_same(loss_and_grads(stock, padded), got, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family,task", [("bert", "lm"), ("qwen2", "lm"), ("mistral", "tok"), ("gemma2", "lm")])
def test_flex_trains_fp32_like_padded_stock(family, task):
    # flex attention's backward (the CPU has none): bidirectional, GQA, a window of 8, soft-capped
    stock, model, report, padded, packed = _pair(family, task)
    with kernel_choice.forced("flex"):
        got = loss_and_grads(model, packed)
    assert kernel_choice.USED.get("flex") and "flex" not in kernel_choice._failed
    assert_same(loss_and_grads(stock, padded), got, rtol=1e-4, atol=1e-5)


def test_autocast_bf16_training_step_matches_padded_stock():
    stock, model, report, padded, packed = _pair("llama")
    with torch.autocast("cuda", torch.bfloat16):
        expected, got = loss_and_grads(stock, padded), loss_and_grads(model, packed)
    assert_same(expected, got, dtype=torch.bfloat16)


@pytest.mark.parametrize("kernel", ["flash_attn", "torch_varlen", "flex"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_fp32_weights_under_bf16_autocast_take_the_fused_kernels(family, kernel, monkeypatch):
    """Trainer's bf16=True: rotary models hand fp32 queries and keys (the projections times fp32 cos/sin) beside a
    bf16 value; the fused kernels take all three in autocast's dtype (they refused the mix: flex's backward raised,
    the varlen kernels were never candidates)."""
    if kernel == "flash_attn" and not attention_kernels.installed("flash_attn"):
        pytest.skip("flash-attn is not installed")
    stock, model, report, padded, packed = _pair(family)
    gqa = model.config.num_attention_heads != model.config.num_key_value_heads
    if kernel == "torch_varlen" and not attention_kernels.torch_varlen_takes(2, 1 if gqa else 2):
        pytest.skip("this torch's varlen_attn has no enable_gqa (or no scale and window_size)")
    called = []
    monkeypatch.setitem(kernel_choice.KERNELS, kernel, _recording(kernel_choice.KERNELS[kernel], called))
    with torch.autocast("cuda", torch.bfloat16), kernel_choice.forced(kernel):
        expected, got = loss_and_grads(stock, padded), loss_and_grads(model, packed)
    assert called and kernel not in kernel_choice._failed
    assert_same(expected, got, dtype=torch.bfloat16)


def test_flash_attention_2_models_are_packed():
    if importlib.util.find_spec("flash_attn") is None:  # installed on a GPU machine only, not an extra
        pytest.skip("flash-attn is not installed")
    model = make("llama", dropout=False).to("cuda", torch.bfloat16)
    model.set_attn_implementation("flash_attention_2")
    stock = copy.deepcopy(model)
    report = optimize(model, label_sparsity=False)
    assert report.padding_free is not None and report.padding_free.spec.mask == "sequences"
    padded = {k: v.cuda() for k, v in padded_batch(LENGTHS, keep=0.6).items()}
    packed = report.collator(lambda features: features)({k: v.cpu() for k, v in padded.items()})
    packed = {k: v.cuda() if torch.is_tensor(v) else v for k, v in packed.items()}
    assert_same(loss_and_grads(stock, padded), loss_and_grads(model, packed), dtype=torch.bfloat16)


@pytest.mark.parametrize("family,mode", [("llama", "positions"), ("bert", "layers")])
def test_flex_attention_models_are_packed_with_gradients(family, mode):
    model = make(family, dropout=False).cuda()
    model.set_attn_implementation("flex_attention")
    stock = copy.deepcopy(model)
    report = optimize(model, label_sparsity=False)
    assert report.padding_free is not None and report.padding_free.spec.mask == mode
    padded = padded_batch(LENGTHS, keep=0.6)
    packed = report.collator(lambda features: features)(dict(padded))
    padded, packed = ({k: v.cuda() if torch.is_tensor(v) else v for k, v in b.items()} for b in (padded, packed))
    assert_same(loss_and_grads(stock, padded), loss_and_grads(model, packed), rtol=1e-4, atol=1e-5)


def test_flex_trains_under_gradient_checkpointing():
    # non-reentrant checkpointing recomputes the forward under saved-tensor hooks: the compiled kernel must run there
    # (were it to raise, it would be dropped with a warning and per-length would take its calls: exact, but slower)
    stock, model, report, padded, packed = _pair("qwen2")
    for each in (stock, model):
        each.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    with kernel_choice.forced("flex"):
        got = loss_and_grads(model, packed)
    assert "flex" not in kernel_choice._failed and kernel_choice.USED.get("flex")
    assert_same(loss_and_grads(stock, padded), got, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_packed_step_makes_no_host_sync(dtype):
    # padding-free alone (label sparsity's row count is another pass's sync): the collator's metadata is on
    # the host already, the hook moves it without waiting, the attention launches on known sizes
    _, model, _, _, packed = _pair("mistral", dtype=dtype)
    model(**packed).loss.backward()  # warm-up: lazy initialisations may sync once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        model(**packed).loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize(
    "options",
    [{}, {"capacity": 350}, {"capacity": 300, "lengths": (200, 100, 50, 3, 97)}, {"causal": False, "capacity": 350},
     {"window": 100}, {"window": 260}, {"causal": False, "window": 150, "capacity": 350}],
)  # fmt: skip
def test_flex_over_many_blocks_matches_per_length_with_gradients(options):
    # Qwen2.5-0.5B's layout in rows of 300-512 (several 128-blocks: full, partial and skipped ones, in the backward
    # too); window 260: a full block off the diagonal under a causal window
    from tests.passes.test_flex_kernel import _stock
    from tests.passes.test_kernel_choice import _published_call

    cpu = _published_call(_stock(), **options)
    call = cpu.with_tensors(*(x.cuda() for x in (cpu.query, cpu.key, cpu.value)))
    call.kwargs.update({k: v.cuda() if torch.is_tensor(v) else v for k, v in call.kwargs.items()})
    call.sequences = call.sequences.to("cuda")
    expected = kernel_choice._run_once(call, "per_length", training=True)
    for want, got in zip(expected, kernel_choice._run_once(call, "flex", training=True)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_a_packed_flex_step_makes_no_host_sync():
    # the block mask is built on the device from the segments: no .item(), nonzero or host-side size
    _, model, _, _, packed = _pair("mistral")
    with kernel_choice.forced("flex"):
        model(**packed).loss.backward()  # warm-up: the compile
        torch.cuda.synchronize()
        packed = {k: v.clone() if torch.is_tensor(v) else v for k, v in packed.items()}  # a new batch: a new mask
        torch.cuda.set_sync_debug_mode("error")
        try:
            model(**packed).loss.backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert kernel_choice.USED.get("flex") and "flex" not in kernel_choice._failed
