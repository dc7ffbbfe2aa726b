"""Every pass's install check gives back a one-line problem, never an exception, whatever the model returns: logits
longer than the mask (PEFT prompt tuning's [B, 8 + L, V] for [B, L] tokens, which made padding-free's per-token
check raise an IndexError under TRL's own tests), another rank, a tuple instead of the model's output, a loss that is
not one number. Each check is fed a model (or module) whose outputs are changed so, and must return a string: the
pass then steps aside with it (passes/self_check.py `never_raises`)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.tiny_models import make, padded_batch
from turbotrain import modeling
from turbotrain.passes import chunked_ce, fused_activation, lean_gated_mlp
from turbotrain.passes import label_sparsity as sparsity
from turbotrain.passes.padding_free import PaddingFree, _packed, compare_token_outputs, packing_spec, scored_calls
from turbotrain.passes.padding_free import self_check as padding_free_check
from turbotrain.passes.self_check import check_under_run_precision, compare_losses

VIRTUAL_TOKENS = 8  # TRL's test_prompt_tuning: PromptTuningConfig(num_virtual_tokens=8)
HOW = ("longer", "rank", "tuple")


def unaligned(tensor: torch.Tensor, how: str):
    """`tensor` [B, L, ...] as the odd model returns it: 8 positions before the sequence, one more rank, or a tuple."""
    if how == "longer":
        before = torch.zeros_like(tensor[:, :1]).expand(-1, VIRTUAL_TOKENS, *tensor.shape[2:])
        return torch.cat([before, tensor], dim=1)
    return tensor.unsqueeze(0) if how == "rank" else (tensor,)


def unaligning(module: nn.Module, key: str, how: str):
    """A forward hook making `module`'s output `key` (logits, last_hidden_state) unaligned, or the output a tuple."""

    def hook(module, args, output):
        if how == "tuple":
            return output.to_tuple()
        output[key] = unaligned(output[key], how)
        return output

    return module.register_forward_hook(hook)


def decoder():
    return make("llama", dropout=False)


def check_padding_free(model):
    return padding_free_check(model, PaddingFree(model, packing_spec(model, mask="block"), pools=False), "per_token")


def check_scored_calls(model):
    packer, why = scored_calls.pack_scored_calls(model, check=False)
    assert why is None
    return scored_calls.self_check(model, packer)


def check_label_sparsity(model):
    with sparsity._trial_sparsity(model, sparsity.find_head(model)) as trial:
        return sparsity.self_check(model, trial)


def check_chunked_ce(model):
    head = chunked_ce.ChunkedHead(model, modeling.output_projection(model), "always")
    with sparsity._trial_sparsity(model, sparsity.find_head(model), head) as trial:
        return chunked_ce.self_check(model, trial)


MODEL_CHECKS = {
    "padding_free": check_padding_free,
    "scored_calls": check_scored_calls,
    "label_sparsity": check_label_sparsity,
    "chunked_ce": check_chunked_ce,
}


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("check", sorted(MODEL_CHECKS))
def test_model_checks_return_a_problem_when_the_body_outputs_do_not_line_up(check, how):
    model = decoder()
    unaligning(model.model, "last_hidden_state", how)  # the head and the loss then see what the body gives
    problem = MODEL_CHECKS[check](model)
    assert isinstance(problem, str) and problem, problem


@pytest.mark.parametrize("how", HOW)
def test_padding_free_returns_a_problem_for_logits_that_do_not_line_up_with_the_mask(how):
    # the reported case: the loss agrees (it is the model's own), the per-token comparison indexed [B, L + 8, V]
    # logits with the [B, L] mask and raised
    model = decoder()
    unaligning(model, "logits", how)
    problem = check_padding_free(model)
    assert isinstance(problem, str) and problem, problem
    spec = packing_spec(model, mask="block")
    PaddingFree(model, spec, pools=False)
    padded = {k: v for k, v in padded_batch([6, 2, 9]).items() if k != "labels"}
    problem = compare_token_outputs(model, padded, _packed(padded, spec, "cpu"))
    assert isinstance(problem, str) and problem, problem
    if how == "longer":
        assert "do not line up" in problem


LOSSES = {
    "a tuple": lambda output: output.to_tuple(),
    "a loss per row": lambda output: {"loss": output.loss.expand(3) + torch.arange(3.0)},
    "a float loss": lambda output: {"loss": output.loss.item() + 1},
    "no output": lambda output: None,
}


@pytest.mark.parametrize("check", [compare_losses, check_under_run_precision], ids=["forward", "run-precision"])
@pytest.mark.parametrize("rewritten", sorted(LOSSES))
def test_loss_checks_return_a_problem_for_any_rewritten_output(check, rewritten):
    model = decoder()
    batch = padded_batch([6, 2, 9])

    class Output(dict):
        __getattr__ = dict.get

    def odd():
        made = LOSSES[rewritten](model(**batch))
        return Output(made) if isinstance(made, dict) else made

    problem = check(model, lambda: model(**batch), odd, "odd")
    assert isinstance(problem, str) and problem, problem


class Mlp(nn.Module):
    """A gated MLP (Transformers' plain line) whose output comes back unaligned (`how`)."""

    def __init__(self, how: str):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(8, 16), nn.Linear(8, 16), nn.Linear(16, 8)
        self.act_fn, self.how = nn.SiLU(), how

    def forward(self, x):
        return unaligned(self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x)), self.how)


class Gelu(nn.Module):
    def __init__(self, how: str):
        super().__init__()
        self.how = how

    def forward(self, x):
        return unaligned(nn.functional.gelu(x, approximate="tanh"), self.how)


@pytest.mark.parametrize("how", HOW)
def test_module_checks_return_a_problem_for_outputs_that_do_not_line_up(how):
    assert isinstance(lean_gated_mlp._mismatch(Mlp(how)), str)
    assert isinstance(fused_activation._mismatch(Gelu(how)), str)


@pytest.mark.requires_llm
@pytest.mark.parametrize("how", HOW)
def test_the_fused_lora_check_returns_a_problem_for_outputs_that_do_not_line_up(how):
    from peft import LoraConfig, get_peft_model

    from turbotrain.passes import fused_lora

    model = get_peft_model(decoder(), LoraConfig(r=4, target_modules=["q_proj"], lora_dropout=0.0))
    layer = fused_lora.lora_layers(model)[0]
    layer.base_layer.register_forward_hook(lambda module, args, output: unaligned(output, how))
    assert isinstance(fused_lora._layer_mismatch(layer), str)
