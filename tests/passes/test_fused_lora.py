"""Fused LoRA: same output and trainable gradients as stock PEFT (fp32 1e-5; bf16 loose) on Llama- and
Qwen2-shaped models at their published head / key-value-head ratios, odd shapes; refusals change nothing;
adapters save, load and merge as stock's; a TurboTrainer run has stock Trainer's losses."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.parity import assert_same, loss_and_grads
from tests.tiny_models import decoder_config
from turbotrain.modeling import synthetic_batch
from turbotrain.passes.fused_lora import apply_fused_lora, lora_layers
from turbotrain.passes.optimize import optimize

pytestmark = pytest.mark.requires_llm

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ODD_BATCHES = ([37, 37, 37], [37, 20, 1])  # batch 3, length 37: full rows, then uneven padded ones


def llama(dtype=torch.float32, seed: int = 0):
    """Llama-3.2-1B's proportions: 32 heads / 8 key-value heads (4:1), MLP 4 x hidden, untied head."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(decoder_config(hidden=64, heads=8, width=256)).to(dtype)


def qwen2(dtype=torch.float32, seed: int = 0):
    """Qwen2.5-0.5B's proportions: 14 heads / 2 key-value heads (7:1), biased q/k/v, tied embeddings."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = decoder_config(Qwen2Config, hidden=56, heads=14, width=304, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config).to(dtype)


def with_lora(model, **overrides):
    from peft import LoraConfig, get_peft_model

    # init_lora_weights=False: B is random, not zero, so A's gradient and the adapter's output are not zero
    settings = dict(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.0, init_lora_weights=False)
    return get_peft_model(model, LoraConfig(**{**settings, **overrides}), autocast_adapter_dtype=False)


def stock_and_fused(build, **overrides):
    stock = with_lora(build(), **overrides)
    fused = copy.deepcopy(stock)
    return stock, fused, apply_fused_lora(fused)


@pytest.mark.parametrize("build", [llama, qwen2], ids=["llama", "qwen2"])
def test_loss_and_every_trainable_gradient_match_stock(build):
    stock, fused, installed = stock_and_fused(build)
    assert installed is not None and len(installed.modules) == len(TARGETS) * 2
    for seed, lengths in enumerate(ODD_BATCHES):
        batch = synthetic_batch(stock, lengths, seed=seed)
        expected, got = loss_and_grads(stock, batch), loss_and_grads(fused, batch)
        trainable = [name for name, grad in expected[1].items() if grad is not None]
        assert trainable and all("lora_" in name for name in trainable)  # frozen weights: no gradient, as stock
        assert_same(expected, got)
        diff = max((got[1][n] - expected[1][n]).abs().max() / expected[1][n].abs().max() for n in trainable)
        print(f"{build.__name__} {lengths}: loss {expected[0]:.8f} vs {got[0]:.8f}, max rel grad diff {diff:.2e}")


def test_input_gradient_matches_when_the_input_requires_grad():
    """Layer 0's projections see a frozen embedding's output (no input gradient); with input grads on
    (gradient checkpointing's `enable_input_require_grads`) every layer's input gradient flows too."""
    stock, fused, _ = stock_and_fused(llama)
    for model in (stock, fused):
        model.enable_input_require_grads()
    batch = synthetic_batch(stock, [37, 20, 1], seed=3)
    assert_same(loss_and_grads(stock, batch), loss_and_grads(fused, batch))


def test_gradient_checkpointing_matches_stock():
    stock, fused, _ = stock_and_fused(qwen2)
    for model in (stock, fused):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    batch = synthetic_batch(stock, [37, 20, 1], seed=4)
    assert_same(loss_and_grads(stock, batch), loss_and_grads(fused, batch))


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


def test_one_layer_runs_two_gemms_and_no_elementwise_pass():
    stock, fused, _ = stock_and_fused(llama)
    layer, stock_layer = lora_layers(fused)[0], lora_layers(stock)[0]
    x = torch.randn(3, 37, layer.in_features)
    ops = {}
    for name, module in (("stock", stock_layer), ("fused", layer)):
        with _Ops() as recorded:
            module(x)
        ops[name] = [op for op in recorded.names if op not in ("t", "view", "reshape", "_unsafe_view", "detach")]
    print(ops)
    assert "mul" in ops["stock"] and "add" in ops["stock"]
    assert sorted(ops["fused"]) == ["addmm_", "mm", "mm"]


def _largest_relative_error(step, reference) -> float:
    (_, grads), (_, expected) = step, reference
    return max(
        ((grads[name].float() - grad).abs().max() / grad.abs().max()).item()
        for name, grad in expected.items()
        if grad is not None
    )


def _assert_as_close_as_stock_to_fp32(stock_step, fused_step, reference):
    """bf16 is loose: the fused run must be as near the fp32 result as stock's bf16 run is (stock itself is
    off by ~5% of a gradient's largest value here), with a loss as close."""
    stock_error, fused_error = (_largest_relative_error(s, reference) for s in (stock_step, fused_step))
    print(f"largest gradient error vs fp32: stock {stock_error:.3f}, fused {fused_error:.3f}")
    assert fused_error <= 1.5 * stock_error + 1e-3
    stock_loss_error = abs(stock_step[0].float() - reference[0]).item()
    assert abs(fused_step[0].float() - reference[0]).item() <= 2 * stock_loss_error + 1e-3 * reference[0].item()


def test_the_output_may_be_modified_in_place_as_stock_allows():
    stock, fused, _ = stock_and_fused(llama)
    layer, stock_layer = lora_layers(fused)[0], lora_layers(stock)[0]
    x = torch.randn(3, 37, layer.in_features)
    grads = []
    for module in (stock_layer, layer):
        module.zero_grad()
        module(x).mul_(2).square().sum().backward()
        grads.append(module.lora_A["default"].weight.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-6)


def test_bf16_is_as_close_to_fp32_as_stock_bf16():
    stock, fused, installed = stock_and_fused(lambda: llama(torch.bfloat16))
    assert installed is not None
    batch = synthetic_batch(stock, [37, 20, 1], seed=5)
    reference = loss_and_grads(copy.deepcopy(stock).float(), batch)
    _assert_as_close_as_stock_to_fp32(loss_and_grads(stock, batch), loss_and_grads(fused, batch), reference)


def test_autocast_bf16_casts_as_stock_linear_layers_do():
    stock, fused, _ = stock_and_fused(qwen2)
    batch = synthetic_batch(stock, [37, 20, 1], seed=6)
    reference = loss_and_grads(stock, batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        stock_step, fused_step = loss_and_grads(stock, batch), loss_and_grads(fused, batch)
    assert all(g is None or g.dtype == torch.float32 for g in fused_step[1].values())
    _assert_as_close_as_stock_to_fp32(stock_step, fused_step, reference)


def _refused(caplog, model) -> str:
    before = {name: param.clone() for name, param in model.state_dict().items()}
    with caplog.at_level(logging.INFO, logger="turbotrain"):
        assert apply_fused_lora(model) is None
    assert all("forward" not in layer.__dict__ for layer in lora_layers(model))
    assert all(torch.equal(before[name], param) for name, param in model.state_dict().items())
    return caplog.text


@pytest.mark.parametrize(
    "overrides, reason",
    [
        (dict(lora_dropout=0.1), "lora_dropout > 0"),
        (dict(use_dora=True), "DoRA or another LoRA variant"),
        (dict(lora_bias=True), "lora_bias"),
    ],
    ids=["dropout", "dora", "lora_bias"],
)
def test_refused_configurations_leave_the_model_stock(caplog, overrides, reason):
    text = _refused(caplog, with_lora(llama(), **overrides))
    assert f"fused_lora left 14 of 14 LoRA layers stock: 14 with {reason}" in text


def test_merged_several_active_and_mixed_dtype_adapters_are_refused(caplog):
    merged = with_lora(llama())
    merged.merge_adapter()
    assert "merged or disabled adapters" in _refused(caplog, merged)

    several = with_lora(llama())
    several.add_adapter("second", several.peft_config["default"])
    several.base_model.set_adapter(["default", "second"])
    assert "several active adapters" in _refused(caplog, several)


def test_fp32_adapters_on_a_bf16_base_fuse_under_autocast_only(caplog):
    """PEFT's default on a bf16 model: fp32 adapters. Without autocast stock's forward runs (its own casts);
    under autocast (Trainer's bf16=True) everything is cast to bf16 as autocast casts stock's layers."""
    from peft import LoraConfig, get_peft_model

    stock = get_peft_model(llama(torch.bfloat16), LoraConfig(r=4, target_modules=TARGETS, init_lora_weights=False))
    assert lora_layers(stock)[0].lora_A["default"].weight.dtype == torch.float32
    fused = copy.deepcopy(stock)
    with caplog.at_level(logging.INFO, logger="turbotrain"):
        assert apply_fused_lora(fused) is not None
    assert "14 LoRA layers keep adapters in another dtype than their base" in caplog.text
    batch = synthetic_batch(stock, [37, 20, 1], seed=10)
    assert_same(loss_and_grads(stock, batch), loss_and_grads(fused, batch), rtol=0, atol=0)  # stock's forward
    reference = loss_and_grads(copy.deepcopy(stock).float(), batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        stock_step, fused_step = loss_and_grads(stock, batch), loss_and_grads(fused, batch)
    _assert_as_close_as_stock_to_fp32(stock_step, fused_step, reference)


def test_gpt2_conv1d_bases_and_models_without_lora_are_left_alone(caplog):
    from peft import LoraConfig, get_peft_model

    from tests.tiny_models import make

    gpt2 = get_peft_model(make("gpt2", dropout=False), LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True))
    assert "a base that is not a plain nn.Linear" in _refused(caplog, gpt2)
    assert apply_fused_lora(llama()) is None and "fused_lora" not in optimize(llama()).skipped


def test_state_changes_after_install_run_stock_forward():
    """disable_adapter(), merge_adapter() and set_adapter() after install: each call runs stock's forward."""
    stock, fused, _ = stock_and_fused(llama)
    batch = synthetic_batch(stock, [37, 20, 1], seed=7)
    with torch.no_grad():
        with stock.disable_adapter(), fused.disable_adapter():
            torch.testing.assert_close(fused(**batch).logits, stock(**batch).logits)
        for model in (stock, fused):
            model.merge_adapter()
        torch.testing.assert_close(fused(**batch).logits, stock(**batch).logits, rtol=1e-5, atol=1e-5)
        for model in (stock, fused):
            model.unmerge_adapter()
        torch.testing.assert_close(fused(**batch).logits, stock(**batch).logits, rtol=1e-5, atol=1e-5)


def test_adapters_save_load_and_merge_as_stock(tmp_path):
    from peft import PeftModel
    from safetensors.torch import load_file

    stock, fused, _ = stock_and_fused(qwen2)
    assert stock.state_dict().keys() == fused.state_dict().keys()
    for model, name in ((stock, "stock"), (fused, "fused")):
        model.save_pretrained(tmp_path / name)
    saved = {name: load_file(tmp_path / name / "adapter_model.safetensors") for name in ("stock", "fused")}
    assert saved["stock"].keys() == saved["fused"].keys()
    assert all(torch.equal(saved["stock"][key], saved["fused"][key]) for key in saved["stock"])

    loaded = PeftModel.from_pretrained(qwen2(), tmp_path / "fused")
    installed = apply_fused_lora(loaded)
    assert installed is not None
    batch = synthetic_batch(stock, [37, 20, 1], seed=8)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, stock(**batch).logits, rtol=1e-5, atol=1e-5)

    merged_stock, merged_fused = stock.merge_and_unload(), fused.merge_and_unload()
    assert lora_layers(merged_fused) == []
    expected = merged_stock.state_dict()
    assert merged_fused.state_dict().keys() == expected.keys()
    for name, weight in merged_fused.state_dict().items():
        assert torch.equal(weight, expected[name]), name


def test_optimize_installs_it_and_undo_removes_it():
    model = with_lora(llama())
    report = optimize(model)
    assert "fused_lora" in report.applied and all("forward" in layer.__dict__ for layer in lora_layers(model))
    report.undo()
    assert report.fused_lora is None and all("forward" not in layer.__dict__ for layer in lora_layers(model))
    assert "fused_lora" not in optimize(with_lora(llama()), fused_lora=False).applied


def test_turbo_trainer_golden_losses_match_stock_trainer(tmp_path):
    from tests.trainer_helpers import assert_pass_trains_as_stock

    stock, turbo = assert_pass_trains_as_stock(tmp_path, lambda: with_lora(qwen2()), "fused_lora")
    adapters = {n: p for n, p in stock.model.named_parameters() if p.requires_grad}
    for name, param in turbo.model.named_parameters():
        if param.requires_grad:
            torch.testing.assert_close(param, adapters[name], rtol=1e-4, atol=1e-6, msg=name)


def test_under_torch_compile_the_stock_forward_is_traced():
    stock, fused, _ = stock_and_fused(llama)
    layer, stock_layer = lora_layers(fused)[0], lora_layers(stock)[0]
    graphs = []

    def recording_backend(graph_module, example_inputs):
        graphs.append([str(node.target) for node in graph_module.graph.nodes])
        return graph_module.forward

    layer.compile(backend=recording_backend)  # in place, as the inductor backend compiles
    x = torch.randn(3, 37, layer.in_features)
    torch.testing.assert_close(layer(x), stock_layer(x))
    (targets,) = graphs
    assert any("mul" in target for target in targets) and not any("addmm" in target for target in targets)


def test_a_deep_copy_of_an_installed_model_runs_its_own_weights():
    """TRL's reference models and the bench copy models with `copy.deepcopy`: the fused forward must bind
    to the copy's layer, not to the original's."""
    stock, fused, _ = stock_and_fused(llama)
    copied = copy.deepcopy(fused)
    with torch.no_grad():
        for layer in lora_layers(copied):
            layer.lora_B["default"].weight.mul_(3)
        for layer in lora_layers(stock):
            layer.lora_B["default"].weight.mul_(3)
    assert all("forward" in layer.__dict__ for layer in lora_layers(copied))
    batch = synthetic_batch(stock, [37, 20, 1], seed=11)
    assert_same(loss_and_grads(stock, batch), loss_and_grads(copied, batch))
