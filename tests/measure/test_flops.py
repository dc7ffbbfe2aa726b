"""The FLOP formula of measure/flops.py on known sizes, the work counted per pass, and the matmul peak."""

from __future__ import annotations

import torch

from tests.tiny_models import VOCAB, make
from turbotrain.measure.flops import ModelFlops, StepWork, batch_work, mfu, step_flops
from turbotrain.measure.peak import matmul_peak


def test_gpt2_sizes_leave_out_embeddings_and_count_the_tied_head_once():
    model = make("gpt2")  # n_embd 32, 2 layers, vocab 97, tied head
    sizes = ModelFlops.of(model)
    total = sum(p.numel() for p in model.parameters())  # parameters() yields the tied weight once
    positions = model.transformer.wpe.weight.numel()
    assert sizes.head_params == VOCAB * 32
    assert sizes.body_params == total - positions - VOCAB * 32
    assert (sizes.layers, sizes.hidden) == (2, 32)


def test_batch_work_per_pass():
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    labels = torch.tensor([[-100, 5, -100, 6], [7, -100, -100, -100]])
    batch = {"input_ids": torch.zeros(2, 4, dtype=torch.long), "attention_mask": mask, "labels": labels}
    assert batch_work(batch, packed=False, sparse_head=False, causal=False) == StepWork(8, 8, 32)
    assert batch_work(batch, packed=True, sparse_head=True, causal=False) == StepWork(6, 3, 16 + 4)
    assert batch_work(batch, packed=True, sparse_head=True, causal=True).head_rows == 2  # labels[:, 1:]


def test_step_flops_is_the_stated_formula():
    sizes = ModelFlops(body_params=1000, head_params=200, layers=2, hidden=8)
    work = StepWork(body_tokens=10, head_rows=3, attention_square=50)
    assert step_flops(sizes, work) == 6 * 1000 * 10 + 6 * 200 * 3 + 12 * 2 * 8 * 50
    assert mfu(100.0, 2.0, 200.0) == (50.0, 0.25)
    frozen = ModelFlops(
        body_params=1000, head_params=200, layers=2, hidden=8, frozen_body_params=900, frozen_head_params=200
    )
    # frozen weights: forward and the input's gradient only (4 FLOPs per weight and token, not 6)
    assert step_flops(frozen, work) == (6 * 100 + 4 * 900) * 10 + 4 * 200 * 3 + 12 * 2 * 8 * 50


def test_a_lora_models_frozen_base_and_head_are_counted_apart():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(make("llama"), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    sizes = ModelFlops.of(model)
    adapters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert sizes.frozen_head_params == sizes.head_params == VOCAB * 32
    assert sizes.body_params - sizes.frozen_body_params == adapters


def test_matmul_peak_is_positive_and_named():
    peak = matmul_peak(torch.float32, size=128, repeats=2)
    assert peak.flops_per_s > 0 and peak.dtype == "float32"
