"""The FLOP formula of bench/flops.py on known sizes, and the work counted per peer."""

from __future__ import annotations

import pytest
import torch

from tests.bench.tiny import tiny_workload
from tests.tiny_models import VOCAB, make
from turbotrain.bench.workload import Workload
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


def test_matmul_peak_is_positive_and_named():
    peak = matmul_peak(torch.float32, size=128, repeats=2)
    assert peak.flops_per_s > 0 and peak.dtype == "float32"


def test_clm_workload_is_gpt2_on_fixed_blocks():
    workload = Workload(task="clm", hidden_size=32, num_layers=1, num_heads=2, vocab_size=500)
    assert type(workload.initial_model()).__name__ == "GPT2LMHeadModel"
    assert "--task clm" in workload.command()
    with pytest.raises(ValueError, match="clm"):
        Workload(task="clm", lengths="variable")


@pytest.mark.slow
def test_tiny_clm_bench_reports_mfu_for_every_peer(tmp_path):
    from turbotrain.bench.runner import run_bench

    workload = tiny_workload(task="clm")
    result = run_bench(workload, out_dir=tmp_path)
    assert result["matmul_peak"]["flops_per_s"] > 0
    for row in result["peers"].values():
        assert row["gflops_per_s"] > 0 and 0 < row["mfu"] < 1.5
    assert result["peers"]["turbo"]["max_rel_loss_diff"] < 1e-5
    assert "MFU" in (tmp_path / "bench.md").read_text() and "GPT-2 causal LM" in (tmp_path / "bench.md").read_text()
