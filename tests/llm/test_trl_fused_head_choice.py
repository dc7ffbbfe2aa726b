"""TRL's fused-head kernel or the chunked head for a Turbo trainer's fused calls (passes/chunked_ce/head_choice.py):
the two give the same per-row answer and gradients; on an accelerator the faster as measured takes the calls, and
an SFT, a DPO and a GRPO run through TRL's kernel log stock's losses and metrics. The CPU is timed here as an accelerator
is, with the timings given by the test."""

from __future__ import annotations

import pytest
import torch

from tests.llm.test_trl import assert_same_history, sft_history
from tests.llm.test_trl_dpo import METRICS, assert_metric_close, dpo_history
from tests.trainer_helpers import assert_losses_close
from turbotrain.passes import device_timing
from turbotrain.passes.chunked_ce import head_choice
from turbotrain.passes.chunked_ce.logprobs import linear_log_probs
from turbotrain.utils.warnings import TurbotrainWarning

pytestmark = pytest.mark.requires_llm


@pytest.fixture
def trl_faster(monkeypatch, tmp_path):
    """Timed as on an accelerator, where TRL's kernel (timed second) measures faster; the measurements kept."""
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path))
    monkeypatch.setattr(head_choice, "_chosen", {})
    monkeypatch.setattr(device_timing, "timed_on", lambda device: True)
    steps = []
    monkeypatch.setattr(
        device_timing, "_medians_ms", lambda stock, trl, device: steps.extend([stock, trl]) or (2.0, 1.0)
    )
    return steps


@pytest.mark.parametrize("softcap,temperature", [(None, 1.0), (30.0, 0.7)])
def test_trls_kernel_answers_as_the_chunked_head(softcap, temperature):
    torch.manual_seed(0)
    hidden = torch.randn(37, 24, requires_grad=True)
    weight = torch.randn(211, 24, requires_grad=True)
    targets = torch.randint(0, 211, (37,))
    answers, gradients = [], []
    for project in (
        lambda: head_choice.trl_projection(hidden, weight, None, targets, softcap, temperature, True),
        lambda: linear_log_probs(hidden, weight, None, targets, softcap=softcap, temperature=temperature),
    ):
        answer = project()
        weights = torch.linspace(0.5, 2.0, 37)  # any per-row weighting (DPO's, GRPO's)
        gradients.append(torch.autograd.grad((answer[0] * weights).sum(), [hidden, weight]))
        answers.append(answer)
    for got, expected in zip(answers[0], answers[1]):
        torch.testing.assert_close(got.float(), expected.float(), rtol=1e-5, atol=1e-5)
    for got, expected in zip(*gradients):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_an_sft_run_through_trls_kernel_logs_stocks_history(tmp_path, trl_faster):
    trainer, turbo_logs = sft_history(tmp_path, True, steps=4)
    assert set(head_choice.chosen_heads().values()) == {head_choice.TRL} and trl_faster
    _, stock_logs = sft_history(tmp_path, False, steps=4)
    assert_same_history(turbo_logs, stock_logs)


def test_a_dpo_run_through_trls_kernel_logs_stocks_metrics(tmp_path, trl_faster):
    _, fast = dpo_history(tmp_path, True)
    assert set(head_choice.chosen_heads().values()) == {head_choice.TRL}
    _, stock = dpo_history(tmp_path, False)
    for metric in METRICS:
        assert_metric_close(metric, [e[metric] for e in fast], [e[metric] for e in stock])


def test_a_grpo_run_through_trls_kernel_logs_stocks_metrics(tmp_path, trl_faster):
    """GRPO's calls (the policy's log-probs and entropy, the reference's log-probs) at its sampling temperature."""
    from tests.llm.test_trl_grpo import METRICS as GRPO_METRICS
    from tests.llm.test_trl_grpo import grpo_run

    _, fast = grpo_run(tmp_path, True)
    assert set(head_choice.chosen_heads().values()) == {head_choice.TRL} and trl_faster
    _, stock = grpo_run(tmp_path, False)
    for metric in GRPO_METRICS:
        assert_losses_close([e[metric] for e in fast], [e[metric] for e in stock], rtol=1e-5)


def test_the_chunked_head_stays_where_it_measured_faster(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path))
    monkeypatch.setattr(head_choice, "_chosen", {})
    monkeypatch.setattr(device_timing, "timed_on", lambda device: True)
    steps = []
    monkeypatch.setattr(
        device_timing, "_medians_ms", lambda stock, trl, device: steps.extend([stock, trl]) or (1.0, 2.0)
    )
    sft_history(tmp_path, True, steps=2)
    assert steps and set(head_choice.chosen_heads().values()) == {head_choice.CHUNKED}


def test_the_cpu_is_not_timed(tmp_path, monkeypatch):
    monkeypatch.setattr(head_choice, "_chosen", {})
    monkeypatch.setattr(device_timing, "_medians_ms", lambda *a: pytest.fail("timed on the CPU"))
    sft_history(tmp_path, True, steps=2)
    assert head_choice.chosen_heads() == {}


def _chunked_of(linear):
    return lambda rows, targets: linear_log_probs(rows, linear.weight, linear.bias, targets)


def test_where_trls_kernel_raises_while_timed_the_chunked_head_answers(tmp_path, monkeypatch):
    """A Triton build for another GPU, or an older torch's addmm check, raised inside a training step before."""
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path))
    monkeypatch.setattr(head_choice, "_chosen", {})
    monkeypatch.setattr(device_timing, "timed_on", lambda device: True)

    def broken(*args):
        raise RuntimeError("no kernel image is available for execution on the device")

    monkeypatch.setattr(head_choice, "trl_projection", broken)
    linear = torch.nn.Linear(16, 300, bias=False)
    hidden = torch.randn(9, 16, requires_grad=True)
    with pytest.warns(
        TurbotrainWarning, match="timing TRL's fused LM head kernel against the chunked head failed .* no kernel image"
    ):
        chosen = head_choice.head_for(hidden, linear, None, 1.0, False, "per_row", _chunked_of(linear))
    assert chosen == head_choice.CHUNKED


def test_a_call_without_gradients_is_its_own_kind_and_timed_forward_only(tmp_path, monkeypatch):
    """A reference model's call (under no_grad) is timed as it runs; a LoRA head (frozen) apart from a trained one."""
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(tmp_path))
    monkeypatch.setattr(head_choice, "_chosen", {})
    monkeypatch.setattr(device_timing, "timed_on", lambda device: True)
    grads_on = []

    def medians(stock_step, trl_step, device):
        stock_step()
        grads_on.append(torch.is_grad_enabled())
        return 1.0, 2.0

    monkeypatch.setattr(device_timing, "_medians_ms", medians)
    linear = torch.nn.Linear(16, 300, bias=False)
    hidden = torch.randn(9, 16)
    chunked = _chunked_of(linear)
    with torch.no_grad():
        head_choice.head_for(hidden, linear, None, 1.0, False, "per_row", chunked)
    head_choice.head_for(hidden.requires_grad_(), linear, None, 1.0, False, "per_row", chunked)
    linear.weight.requires_grad_(False)
    head_choice.head_for(hidden, linear, None, 1.0, False, "per_row", chunked)
    kinds = list(head_choice.chosen_heads())
    assert len(kinds) == 3 and {kind[-2] for kind in kinds} == {"forward only", "backward"}
    assert {kind[-3] for kind in kinds} == {"head trained", "head frozen"}
