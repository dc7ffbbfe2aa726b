"""Lean gated MLP: the same loss and every gradient as stock, bit for bit in fp32 (full fine-tune and LoRA, with
PEFT's forward and with turbotrain's fused LoRA op), in bf16 too; act(gate) and act(gate)*up are really not
kept; the pass steps aside where it must (gradient checkpointing, other saved-tensor hooks, no gradients) and
refuses a module laid out as a gated MLP that computes something else. Shapes: Llama-3.2-1B's head ratio
(tiny), Qwen2.5-0.5B's and Gemma-3-270m's published hidden / MLP width / heads / key-value heads with one or
two layers (Gemma-3's sliding window set below the sequence length); the vocabulary is small (the MLP never
sees it)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

from tests.parity import assert_same, loss_and_grads
from tests.tiny_models import VOCAB
from turbotrain.modeling import gated_mlps, synthetic_batch
from turbotrain.passes import lean_gated_mlp
from turbotrain.passes.fused_lora import apply_fused_lora
from turbotrain.passes.lean_gated_mlp import apply_lean_gated_mlp
from turbotrain.passes.optimize import optimize

ODD_BATCHES = ([37, 37, 37], [37, 20, 1])
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _decoder(config_class: str, model_class: str, dtype, **fields):
    """A seeded causal LM of Transformers' `model_class` from `config_class(**fields)`, small vocabulary."""
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, config_class)(vocab_size=VOCAB, pad_token_id=0, **fields)
    return getattr(transformers, model_class)(config).to(dtype)


def llama(dtype=torch.float32):
    """Llama-3.2-1B's head ratio (4:1 key-value groups), untied head; tiny."""
    shape = dict(hidden_size=64, intermediate_size=256, num_attention_heads=8, num_key_value_heads=2)
    return _decoder("LlamaConfig", "LlamaForCausalLM", dtype, num_hidden_layers=2, tie_word_embeddings=False, **shape)


def qwen2_5_0_5b_mlp(dtype=torch.float32):
    """Qwen2.5-0.5B's hidden 896, MLP 4,864, 14 heads / 2 key-value heads, SiLU; one layer."""
    shape = dict(hidden_size=896, intermediate_size=4864, num_attention_heads=14, num_key_value_heads=2)
    return _decoder("Qwen2Config", "Qwen2ForCausalLM", dtype, num_hidden_layers=1, tie_word_embeddings=True, **shape)


def gemma3_270m(dtype=torch.float32):
    """Gemma-3-270m's hidden 640, MLP 2,048, 4 heads / 1 key-value head of 256, tanh GELU; a sliding layer
    (window 8, below the batches' 37) and a global one."""
    shape = dict(hidden_size=640, intermediate_size=2048, num_attention_heads=4, num_key_value_heads=1, head_dim=256)
    layers = dict(num_hidden_layers=2, sliding_window=8, layer_types=["sliding_attention", "full_attention"])
    return _decoder("Gemma3TextConfig", "Gemma3ForCausalLM", dtype, **layers, **shape)


FAMILIES = {"llama": llama, "qwen2.5-0.5b": qwen2_5_0_5b_mlp, "gemma3-270m": gemma3_270m}


def with_lora(model):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.0, init_lora_weights=False)
    return get_peft_model(model, config, autocast_adapter_dtype=False)


def stock_and_lean(build, lora: str | None = None, dtype=torch.float32):
    stock = build(dtype)
    if lora is not None:
        stock = with_lora(stock)
        if lora == "fused":
            apply_fused_lora(stock)
    lean = copy.deepcopy(stock)
    if lora == "fused":
        apply_fused_lora(lean)  # deepcopy keeps the instance forwards; installing again is harmless
    installed = apply_lean_gated_mlp(lean)
    assert installed is not None and len(installed.modules) == len(gated_mlps(stock))
    return stock, lean, installed


LLM = pytest.mark.requires_llm  # PEFT's LoRA: the llm extra


@pytest.mark.parametrize(
    "lora",
    [None, pytest.param("peft", marks=LLM), pytest.param("fused", marks=LLM)],
    ids=["full", "peft-lora", "fused-lora"],
)
@pytest.mark.parametrize("family", FAMILIES)
def test_loss_and_every_gradient_are_stock_bit_for_bit_in_fp32(family, lora):
    stock, lean, _ = stock_and_lean(FAMILIES[family], lora)
    for seed, lengths in enumerate(ODD_BATCHES):
        batch = synthetic_batch(stock, lengths, seed=seed)
        assert_same(loss_and_grads(stock, batch), loss_and_grads(lean, batch), rtol=0, atol=0)


@pytest.mark.parametrize("lora", [None, pytest.param("peft", marks=LLM)], ids=["full", "peft-lora"])
@pytest.mark.parametrize("autocast", [False, True], ids=["bf16-weights", "fp32-weights-bf16-autocast"])
def test_bf16_is_stock_bit_for_bit_too(autocast, lora):
    dtype = torch.float32 if autocast else torch.bfloat16
    stock, lean, _ = stock_and_lean(gemma3_270m, lora, dtype=dtype)
    batch = synthetic_batch(stock, [37, 20, 1], seed=3)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        expected, got = loss_and_grads(stock, batch), loss_and_grads(lean, batch)
    assert_same(expected, got, rtol=0, atol=0)  # the same bf16 kernels on the same inputs: bit for bit too


def _kept_after_forward(model, batch, mlp) -> list[bool]:
    """Whether `mlp`'s act(gate) and act(gate)*up storages are still alive once the model's forward returned."""
    refs = []
    hooks = [
        mlp.act_fn.register_forward_hook(lambda module, args, out: refs.append(StorageWeakRef(out.untyped_storage()))),
        mlp.down_proj.register_forward_pre_hook(lambda module, args: refs.append(StorageWeakRef(args[0].untyped_storage()))),
    ]  # fmt: skip
    model.train()
    loss = model(**batch).loss
    kept = [not ref.expired() for ref in refs]
    loss.backward()
    for hook in hooks:
        hook.remove()
    return kept


@pytest.mark.parametrize("lora", [None, pytest.param("fused", marks=LLM)], ids=["full", "fused-lora"])
def test_the_activation_and_the_product_are_not_kept(lora):
    stock, lean, installed = stock_and_lean(llama, lora)
    batch = synthetic_batch(stock, [37, 20], seed=0)
    assert _kept_after_forward(stock, batch, gated_mlps(stock)[0]) == [True, True]
    assert _kept_after_forward(lean, batch, installed.modules[0]) == [False, False]


def _lean_calls(monkeypatch) -> list[int]:
    calls = []
    real = lean_gated_mlp._Recipe.__init__

    def counting(self, *args):
        calls.append(1)
        real(self, *args)

    monkeypatch.setattr(lean_gated_mlp._Recipe, "__init__", counting)
    return calls


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_under_gradient_checkpointing_it_is_exact(monkeypatch, reentrant):
    """Non-reentrant checkpointing packs what is saved itself: the lean forward steps aside. Reentrant
    checkpointing runs the forward without gradients, then again with them in the backward: lean there."""
    stock, lean, _ = stock_and_lean(llama)
    for model in (stock, lean):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    batch = synthetic_batch(stock, [37, 20], seed=1)
    calls = _lean_calls(monkeypatch)
    assert_same(loss_and_grads(stock, batch), loss_and_grads(lean, batch), rtol=0, atol=0)
    assert len(calls) == (2 if reentrant else 0)  # two layers, each recomputed once in the backward


def test_it_steps_aside_under_other_saved_tensor_hooks_and_without_gradients(monkeypatch):
    stock, lean, _ = stock_and_lean(llama)
    batch = synthetic_batch(stock, [37, 20], seed=2)
    calls = _lean_calls(monkeypatch)
    with torch.autograd.graph.save_on_cpu():
        assert_same(loss_and_grads(stock, batch), loss_and_grads(lean, batch), rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(lean(**batch).loss, stock(**batch).loss, rtol=0, atol=0)
    assert calls == []
    loss_and_grads(lean, batch)
    assert len(calls) == 2


class PlainMlp(nn.Module):
    """A gated MLP written as Transformers writes it (`plain_gated_forward`)."""

    def __init__(self, act: nn.Module | None = None):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(8, 16), nn.Linear(8, 16), nn.Linear(16, 8)
        self.act_fn = act if act is not None else nn.SiLU()

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj


class SwappedMlp(PlainMlp):
    """The same children, the activation on the up projection."""

    def forward(self, x):
        return self.down_proj(self.act_fn(self.up_proj(x)) * self.gate_proj(x))


class DroppingMlp(PlainMlp):
    """The same children and line, with a dropout on the product (Transformers' GteMLP, T5Gemma's MLP)."""

    def forward(self, x):
        return self.down_proj(torch.nn.functional.dropout(self.act_fn(self.gate_proj(x)) * self.up_proj(x), 0.1))


class ClampedMlp(PlainMlp):
    """The same children, a clamp only real activations reach (DeepSeek-V4's `swiglu_limit`)."""

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)).clamp(max=10) * self.up_proj(x))


def test_only_mlps_whose_forward_is_the_plain_line_are_taken():
    assert gated_mlps(PlainMlp()) != []
    for other in (SwappedMlp, DroppingMlp, ClampedMlp):
        model = nn.Sequential(other())
        assert gated_mlps(model) == [], other.__name__
        assert apply_lean_gated_mlp(model) is None and "forward" not in model[0].__dict__
    patched = PlainMlp()
    patched.forward = lambda x: x  # another library's per-instance forward (Liger's SwiGLU patch)
    assert gated_mlps(patched) == []


def test_the_install_check_catches_a_module_computing_something_else():
    assert lean_gated_mlp._mismatch(PlainMlp()) is None
    assert "differs" in lean_gated_mlp._mismatch(SwappedMlp())


def test_activations_that_keep_more_than_their_input_are_not_taken():
    from transformers.activations import ACT2FN

    for name, taken in (("silu", True), ("gelu", True), ("gelu_pytorch_tanh", True), ("gelu_new", False)):
        assert (gated_mlps(PlainMlp(ACT2FN[name])) != []) is taken, name
    assert gated_mlps(PlainMlp(nn.ReLU())) == []
    assert gated_mlps(PlainMlp(nn.SiLU(inplace=True))) == []  # gate overwritten: nothing to remake a from


def _mlp_pair(act: nn.Module | None = None):
    torch.manual_seed(0)
    stock = PlainMlp(act)
    lean = copy.deepcopy(stock)
    assert apply_lean_gated_mlp(lean) is not None
    return stock, lean


def _grads(mlp, x, **backward):
    mlp.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    out = mlp(x)
    out.square().sum().backward(**backward)
    return [out.detach(), x.grad, *(p.grad for p in mlp.parameters())]


def test_an_in_place_change_of_the_product_before_down_proj_is_seen():
    """A pre-hook that scales h in place: down_proj saves the changed h, which the recipe would not make again."""
    stock, lean = _mlp_pair()
    for mlp in (stock, lean):
        mlp.down_proj.register_forward_pre_hook(lambda module, args: args[0].mul_(2))
    x = torch.randn(3, 5, 8)
    for a, b in zip(_grads(stock, x), _grads(lean, x)):
        assert torch.equal(a, b)


def test_a_hook_that_changes_the_activation_is_seen():
    stock, lean = _mlp_pair()
    for mlp in (stock, lean):
        mlp.act_fn.register_forward_hook(lambda module, args, out: out + 1)
    x = torch.randn(3, 5, 8)
    for a, b in zip(_grads(stock, x), _grads(lean, x)):
        assert torch.equal(a, b)


def test_retained_graphs_and_second_order_gradients_are_stock():
    stock, lean = _mlp_pair()
    x = torch.randn(3, 5, 8, requires_grad=True)
    results = []
    for mlp in (stock, lean):
        out = mlp(x).square().sum()
        first = torch.autograd.grad(out, [x, *mlp.parameters()], create_graph=True, retain_graph=True)
        again = torch.autograd.grad(out, [x], retain_graph=True)  # a second backward through the same graph
        second = torch.autograd.grad(sum(g.square().sum() for g in first), [x, *mlp.parameters()])
        results.append([*first, *again, *second])
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_torch_func_transforms_run_the_stock_forward():
    """torch.func refuses saved-tensor hooks: its wrapped tensors take the module's own forward."""
    stock, lean = _mlp_pair()
    x = torch.randn(3, 5, 8)
    grads = [torch.func.grad(lambda t, m=mlp: m(t).square().sum())(x) for mlp in (stock, lean)]
    assert torch.equal(grads[0], grads[1])


def test_optimize_installs_it_on_gated_models_only_and_remove_restores():
    from tests.tiny_models import make

    model = llama()
    mlps = gated_mlps(model)
    report = optimize(model)
    assert "lean_gated_mlp" in report.applied and report.lean_gated_mlp.modules == mlps and len(mlps) == 2
    assert all("forward" in mlp.__dict__ for mlp in mlps)
    report.undo()
    assert not any("forward" in mlp.__dict__ for mlp in mlps)
    assert "lean_gated_mlp" not in optimize(make("gpt2")).applied
    assert "lean_gated_mlp" not in optimize(llama(), lean_gated_mlp=False).applied


def test_turbo_trainer_golden_losses_match_stock_trainer(tmp_path):
    from tests.trainer_helpers import assert_pass_trains_as_stock

    assert_pass_trains_as_stock(tmp_path, llama, "lean_gated_mlp")


def test_a_trainer_with_non_reentrant_checkpointing_says_the_pass_is_off(tmp_path):
    """TRL's and Transformers' default checkpointing packs each layer's saves itself: the summary names why the
    pass is not active instead of listing it; reentrant checkpointing keeps it."""
    from tests.trainer_helpers import turbo_trainer

    default = turbo_trainer("llama", tmp_path, model=llama(), gradient_checkpointing=True)
    assert "lean_gated_mlp" not in default.turbo_report.applied
    assert "lean_gated_mlp (non-reentrant gradient checkpointing" in default.turbo_summary()
    kwargs = {"use_reentrant": True}
    reentrant = turbo_trainer(
        "llama", tmp_path, model=llama(), gradient_checkpointing=True, gradient_checkpointing_kwargs=kwargs
    )
    assert "lean_gated_mlp" in reentrant.turbo_report.applied
