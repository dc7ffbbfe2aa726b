"""scripts/gpu_check.py cannot rot: its CPU pass (`--device cpu --quick`) runs every section's code at tiny sizes
(in CI about half a minute), and its planning and table helpers are checked on their own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from scripts.gpu_check import bench_plan, markdown
from scripts.gpu_check_bench import PEERS, TASKS, loss_difference, unavailable

from scripts import gpu_check_parity
from turbotrain.passes import chunked_ce

ROOT = Path(__file__).resolve().parents[2]


def test_the_plan_runs_stock_and_turbotrain_first_and_compiles_last():
    plan = bench_plan(quick=False)
    assert len(plan) == len(TASKS) * len(PEERS)
    head = plan[: 2 * len(TASKS)]
    assert {peer for _, peer in head} == {"stock (sdpa)", "turbotrain"}
    assert {peer for _, peer in plan[-len(TASKS) :]} == {"torch_compile"}
    quick = bench_plan(quick=True)
    assert {peer for _, peer in quick} == set(PEERS)  # every peer kind is exercised by the CPU pass


def test_peers_that_do_not_apply_say_why():
    assert "sft" in unavailable("clm", "trl padding_free")
    assert unavailable("asr", "stock + flattening")
    assert unavailable("sft", "stock (sdpa)") is None and unavailable("mlm", "turbotrain") is None


def test_chat_lengths_are_long_tailed_and_fill_the_batch():
    from scripts.gpu_check_kernels import chat_lengths

    lengths = chat_lengths(16384, 500, 4096)
    assert 16384 - 4096 < sum(lengths) <= 16384 and max(lengths) <= 4096 and min(lengths) >= 8
    assert 250 < sorted(lengths)[len(lengths) // 2] < 1000 and max(lengths) > 1500


def test_loss_difference_and_table():
    assert loss_difference([1.0, 2.02], [1.0, 2.0]) == pytest.approx(0.01)
    assert loss_difference([1.0], [1.0, 2.0]) is None
    table = markdown([{"a": 1, "b": "x|y"}, {"a": 2}])
    assert table.splitlines()[0] == "| a | b |" and "x/y" in table


@pytest.mark.slow
def quick_check(out: Path, *flags: str) -> str:
    """`scripts/gpu_check.py --device cpu --quick` with `flags` in a process of its own: its report (exit 0 asserted)."""
    command = [sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--quick", *flags, "--out", str(out)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out.read_text()


def test_the_cpu_pass_runs_every_section_without_a_failing_row(tmp_path):
    report = quick_check(tmp_path / "gpu_check.md")
    for heading in ("Passes against stock", "Host syncs", "Backends against eager", "Packed attention kernels",
                    "LM heads", "Benchmark"):  # fmt: skip
        assert heading in report
    heads = [line for line in report.splitlines() if line.startswith("| quick |")]
    for op in ("sft op", "per-row op"):  # on the CPU: the eager chunks, taken; the fused ones need CUDA
        assert any(
            f"| {op}, eager softmax |" in line and "| PASS (loss" in line and "| yes |" in line for line in heads
        )
        assert any(f"| {op}, fused softmax |" in line and "needs CUDA with Triton" in line for line in heads)
    assert any("| trl kernel |" in line and "| PASS (loss" in line for line in heads)
    for shape in ("qwen2.5-0.5b", "llama-3.2-1b"):  # the chosen kernel against stock + flattening's, per layout
        assert any(line.startswith(f"| {shape} |") and "| yes | PASS |" in line for line in report.splitlines())
    assert "ERROR" not in report and "| FAIL" not in report
    for task in TASKS:
        assert f"| {task} | turbotrain | " in report and f"| {task} | stock (sdpa) | " in report
    assert "PASS (refused)" in report  # onnxruntime's CPU wheel refuses a CUDA model, naming onnxruntime-gpu


class NoCuda:
    """Stand-ins for the CUDA calls the host-sync audit makes, so its logic runs on the CPU."""

    def __init__(self, monkeypatch, sites=None):
        import torch

        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
        monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)
        if sites is not None:
            monkeypatch.setattr(gpu_check_parity, "_phase_sites", lambda *a: sites)


@pytest.mark.parametrize("case", [0, 2])  # label sparsity (host rows), the chunked head
def test_the_sync_audit_passes_a_step_without_syncs(monkeypatch, case):
    import torch

    NoCuda(monkeypatch)
    # the audit does not depend on the vocabulary: Qwen2's 151,936 made case 2 take 15 s of bf16 steps on a CPU;
    # at 8,192 the chunked head still takes the calls, each in one chunk as it would at 151,936
    monkeypatch.setattr(gpu_check_parity, "VOCAB_LARGE", 8192)
    rows = []
    original = chunked_ce.LinearCrossEntropy.apply
    monkeypatch.setattr(chunked_ce.LinearCrossEntropy, "apply", lambda *a: rows.append(len(a[0])) or original(*a))
    row = gpu_check_parity._sync_row(gpu_check_parity.SYNC_CASES[case], torch.device("cpu"), torch.bfloat16)
    assert row["result"] == "PASS", row
    assert "stock 0/0/0, turbo 0/0/0; error mode: no sync" in row["note"]
    if case == 2:
        assert rows and max(rows) <= chunked_ce.chunk_rows_for(151_936), rows


def test_the_sync_audit_fails_a_sync_in_turbotrain_or_an_extra_one_in_the_backward(monkeypatch):
    import torch

    case = gpu_check_parity.SYNC_CASES[0]
    ours = {"forward": ["/x/src/turbotrain/passes/label_sparsity/__init__.py:120"], "backward": [], "optimizer": []}
    NoCuda(monkeypatch, sites=ours)
    row = gpu_check_parity._sync_row(case, torch.device("cpu"), torch.bfloat16)
    assert row["result"] == "FAIL" and "label_sparsity/__init__.py:120" in row["note"]
    calls = iter(
        [{"forward": [], "backward": [], "optimizer": []}, {"forward": [], "backward": ["e"], "optimizer": []}]
    )
    monkeypatch.setattr(gpu_check_parity, "_phase_sites", lambda *a: next(calls))
    row = gpu_check_parity._sync_row(case, torch.device("cpu"), torch.bfloat16)
    assert row["result"] == "FAIL" and "more than stock in: backward" in row["note"]


def test_the_sharded_section_judges_a_worker_result_and_steps_aside_on_the_cpu():
    from scripts.gpu_check_sharded import judge, sharded_rows

    result = {
        "stock": {"losses": [10.0, 9.0]},
        "turbo": {"losses": [10.0, 9.0000001], "passes": ["label_sparsity", "padding_free"]},
        "weight_difference": 3e-7,
    }
    assert judge(result)["result"] == "PASS"
    assert judge({**result, "weight_difference": 1e-2})["result"] == "FAIL"
    assert judge({**result, "turbo": {**result["turbo"], "passes": ["label_sparsity"]}})["result"] == "FAIL"
    assert all("skipped on the CPU" in row["note"] for row in sharded_rows(torch.device("cpu")))


def test_the_report_is_written_after_each_section(tmp_path, capsys):
    from scripts.gpu_check import Report

    out = tmp_path / "report.md"
    report = Report(out)
    report.append("# head\n")
    assert out.read_text() == "# head\n"  # a run cut off at its time limit keeps what it measured
    report.append("## parity\n")
    assert out.read_text() == "# head\n\n## parity\n" and "## parity" in capsys.readouterr().out


def test_zero3_steps_aside_where_deepspeed_is_not_installed(monkeypatch):
    import importlib.util

    from scripts import gpu_check_sharded

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "deepspeed" else real(name))
    row = gpu_check_sharded._row("zero3", 1, cap=lambda seconds: seconds)
    assert row["result"] == "skipped" and "extra: deepspeed" in row["note"]


def test_a_launch_the_budget_cannot_hold_is_skipped_not_started():
    from scripts.gpu_check import Deadline

    from scripts import gpu_check_sharded

    deadline = Deadline(10.0)
    assert 9.0 < deadline.cap(150.0) <= 10.0 and deadline.cap(5.0) == 5.0
    assert Deadline(-1.0).cap(150.0) == 0.0
    row = gpu_check_sharded._row("fsdp2", 1, cap=deadline.cap)  # 10 s left of the budget: under 30
    assert row["result"] == "skipped" and row["note"].startswith("time budget: ")


def test_the_realshape_plan_runs_stock_and_turbotrain_of_every_workload_first_and_compiles_last():
    from scripts.gpu_check_realshape import KINDS, SHAPES, plan

    rows = plan()
    workloads = len(SHAPES) * len(KINDS)
    assert {peer for _, peer in rows[: 2 * workloads]} == {"stock (sdpa)", "turbotrain", "trl defaults"}
    compiling = rows[-len(SHAPES) * 2 * 2 :]  # sft and sft-lora of each shape, Trainer's compile with and without us
    assert {peer for _, peer in compiling} == {"torch_compile", "turbotrain + torch_compile"}
    assert len(rows) == len(set(rows)) == len(SHAPES) * (2 * 11 + 4)


def test_the_realshape_budget_skips_what_its_estimate_does_not_fit_and_names_missing_wheels():
    from scripts.gpu_check import Deadline
    from scripts.gpu_check_realshape import Workload, estimate_s, realshape_rows, unavailable

    sft = Workload("qwen2.5-0.5b", "sft")
    # the published shape at the H200's peak: ~13 s for 3 rounds, a compiling row ~130 s
    assert 5 < estimate_s(sft, "stock (sdpa)", False, 989.4e12, 3) < 40
    assert estimate_s(sft, "torch_compile", False, 989.4e12, 3) > 100
    rows, _ = realshape_rows(torch.device("cpu"), quick=False, deadline=Deadline(0.0))
    assert rows and all(row["result"] in ("skipped", "n/a") for row in rows), rows  # nothing ran
    assert any("time budget" in row["note"] for row in rows)
    assert "too large to carry" in unavailable(sft, "stock (flash_attention_2)", torch.device("cuda"))
    assert "onnxruntime-gpu" in unavailable(sft, "turbotrain (onnxruntime)", torch.device("cuda"))  # CPU wheel here
    with pytest.raises(ValueError, match="unknown"):
        realshape_rows(torch.device("cpu"), False, Deadline(0.0), peers=("deepspeed",))


def _ran(estimate: float, wall: float) -> dict:
    return {"est. s": f"{estimate:.0f}", "wall s": f"{wall:.0f}", "rounds": 3, "result": "PASS", "tokens/s": "1"}


def _budget_skipped(estimate: float) -> dict:
    from scripts.gpu_check_realshape import BUDGET_SKIP

    return {"est. s": f"{estimate:.0f}", "result": "skipped", "note": BUDGET_SKIP + "300 s planned of 310 s)"}


def test_the_second_pass_runs_what_the_guess_skipped_where_the_first_pass_measured_time_left():
    from scripts.gpu_check_realshape import Workload, second_pass

    sft, lora = Workload("qwen2.5-0.5b", "sft"), Workload("qwen2.5-0.5b", "sft-lora")
    rows = {
        (sft, "stock (sdpa)"): _ran(15, 5), (sft, "turbotrain"): _ran(15, 5),
        (lora, "stock (sdpa)"): _ran(15, 5), (lora, "turbotrain"): _ran(15, 5),
        (sft, "liger"): _budget_skipped(15), (sft, "torch_compile"): _budget_skipped(130),
        (lora, "trl defaults"): _budget_skipped(15), (lora, "liger"): _budget_skipped(15),
    }  # fmt: skip
    # measured 3x faster than estimated: liger 5 s + its stock again 5 s, TRL's row 5 + 5; a compile row unmeasured
    # keeps its 130 s; the last row no longer fits 20 s
    assert second_pass(rows, left_s=20.0) == {sft: ["liger"], lora: ["trl defaults"]}
    assert rows[(sft, "liger")]["planned s"] == pytest.approx(5.0) and "planned s" not in rows[(lora, "liger")]
    untouched = {key: dict(row, rounds=None) if "rounds" in row else dict(row) for key, row in rows.items()}
    assert second_pass(untouched, left_s=1000.0) == {}  # nothing measured: the first plan's guess stands
    rows[(sft, "stock (sdpa)")]["result"] = "ERROR"
    assert sft not in second_pass(rows, left_s=1000.0)  # no stock to give ratios
    cut = {(lora, "stock (sdpa)"): _budget_skipped(15), (lora, "turbotrain"): _ran(15, 5),
           (lora, "liger"): _budget_skipped(15)}  # fmt: skip
    assert second_pass(cut, left_s=9.0) == {}  # its stock does not fit: neither does a row that needs its ratios
    assert second_pass(cut, left_s=10.0) == {lora: ["stock (sdpa)", "liger"]}


def test_the_second_pass_keeps_stocks_first_rounds_in_its_row(monkeypatch):
    from scripts.gpu_check_realshape import Workload, _run_again

    from scripts import gpu_check_realshape

    sft = Workload("qwen2.5-0.5b", "sft")
    stock_row = _ran(15, 5)
    rows = {(sft, "stock (sdpa)"): stock_row, (sft, "liger"): {**_budget_skipped(15), "planned s": 5.0}}
    seen = []

    def run(workload, peers, view, *rest):
        seen.append((peers, view[(workload, "stock (sdpa)")] is stock_row))
        for peer in peers:
            view[(workload, peer)].update(result="PASS", rounds=3, note="")

    monkeypatch.setattr(gpu_check_realshape, "_run_workload", run)
    _run_again(sft, ["liger"], rows, torch.device("cpu"), False, 3, 1.0, None)
    assert seen == [(["stock (sdpa)", "liger"], False)]  # stock ran beside it, into a copy of its row
    assert rows[(sft, "stock (sdpa)")] == _ran(15, 5)
    assert rows[(sft, "liger")]["result"] == "PASS" and rows[(sft, "liger")]["note"].startswith("second pass")


def test_a_realshape_row_fails_when_its_loss_leaves_stocks():
    from scripts.gpu_check_realshape import _summary

    def run(tokens_s, losses):
        return {"tokens_s": tokens_s, "flops_s": 1.0, "peak_gb": None, "losses": losses, "summary": ""}

    stock = [run(100.0, [2.0, 1.9]), run(100.0, [2.0, 1.9])]
    row = _summary([run(150.0, [2.0, 1.9001]), run(130.0, [2.0, 1.9])], stock, 10.0, 1e-3, is_stock=False)
    assert row["result"] == "PASS" and row["vs stock"] == "1.40x" and row["per round"] == "1.50/1.30"
    row = _summary([run(150.0, [2.0, 1.95])], stock, 10.0, 1e-3, is_stock=False)
    assert row["result"] == "FAIL" and "loss above" in row["note"]
    row = _summary([run(150.0, [2.0, 1.95])], [], 10.0, 1e-3, is_stock=False)  # stock ERRORed: nothing to judge
    assert row["result"] == "n/a" and row["note"] == "no stock round to compare with"


def test_a_later_call_skips_workloads_left_with_their_stock_alone_and_writes_each_workload_out(monkeypatch):
    """`--peers "stock + flattening"`: DPO has no such peer, so its stock (TRL's defaults) would run alone."""
    from scripts.gpu_check import Deadline

    from scripts import gpu_check_realshape

    ran, written = [], []

    def run(workload, peers, *rest):
        ran.append((workload.kind, peers))
        rest[-1]()  # the progress callback, after each round: one round here

    monkeypatch.setattr(gpu_check_realshape, "_run_workload", run)
    rows, _ = gpu_check_realshape.realshape_rows(torch.device("cpu"), True, Deadline(3600.0),
                                                 peers=("stock + flattening",), on_progress=lambda rows, peak: written.append(len(rows)))  # fmt: skip
    assert ran and {kind for kind, _ in ran} == {"sft", "sft-lora"}
    assert all(peers == ["stock (sdpa)", "stock + flattening"] for _, peers in ran)
    dpo = [row for row in rows if row["workload"].endswith("dpo")]
    assert dpo and all(row["note"] == "skipped: no other peer chosen" for row in dpo)
    assert len(written) == len(ran) + 1  # the report rewritten after each round, and at the end


def test_a_section_that_raises_is_one_error_row_and_the_sections_after_it_run(monkeypatch, tmp_path):
    from scripts.gpu_check import run

    from scripts import gpu_check_kernels

    def broken(*args):
        raise torch.OutOfMemoryError("the test's")

    monkeypatch.setattr(gpu_check_kernels, "kernel_rows", broken)
    report, ok = run(torch.device("cpu"), True, ["kernels", "heads"], 3600.0, tmp_path / "r.md")
    kernels, heads = report.split("## LM heads")
    assert "| kernels | ERROR | OutOfMemoryError: the test's |" in kernels and not ok
    assert "| quick | stock | 256 |" in heads and (tmp_path / "r.md").read_text() == report


def test_realshape_raising_midway_keeps_the_workloads_it_finished(monkeypatch, tmp_path):
    from scripts.gpu_check import run

    from scripts import gpu_check_realshape

    def half_done(device, quick, deadline, shapes, peers, on_progress):
        on_progress([{"workload": "qwen2.5-0.5b sft", "peer": "stock (sdpa)", "tokens/s": "9", "result": ""}], "x")
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(gpu_check_realshape, "realshape_rows", half_done)
    report, ok = run(torch.device("cpu"), True, ["realshape"], 3600.0, tmp_path / "r.md")
    assert "| qwen2.5-0.5b sft | stock (sdpa) |  | 9 |" in report
    assert "| (the rest) |  |" in report and "RuntimeError: CUDA error" in report and not ok
    assert "(the rest)" not in report.split("Against issue 45's bars")[1]  # no verdict of the row saying it raised


def _faked_rounds(monkeypatch, raise_at: int | None = None) -> list:
    """`_run_workload`'s model and measurements faked: every round measures 100 tokens/s, the `raise_at`-th
    measurement raises; the list of measurements made."""
    from types import SimpleNamespace

    from scripts import gpu_check_realshape

    measured = []

    def measure(build, warmup, device):
        measured.append(1)
        if len(measured) == raise_at:
            raise torch.OutOfMemoryError("the test's")
        return {"tokens_s": 100.0, "flops_s": 1.0, "peak_gb": None, "losses": [2.0, 1.9], "summary": ""}

    class Model:
        config = SimpleNamespace(vocab_size=10)

        def to(self, device):
            return self

    monkeypatch.setattr(gpu_check_realshape, "build_model", lambda *args: Model())
    monkeypatch.setattr(gpu_check_realshape, "build_examples", lambda *args: [])
    monkeypatch.setattr(gpu_check_realshape, "measure", measure)
    return measured


def test_a_peer_that_errs_after_a_good_round_keeps_none_of_its_figures(monkeypatch):
    from scripts.gpu_check import Deadline
    from scripts.gpu_check_realshape import Workload, _run_workload

    _faked_rounds(monkeypatch, raise_at=4)  # turbotrain's second round
    sft = Workload("qwen2.5-0.5b", "sft")
    peers = ["stock (sdpa)", "turbotrain"]
    rows = {(sft, peer): {"est. s": "15"} for peer in peers}
    _run_workload(sft, peers, rows, torch.device("cpu"), False, 3, 1.0, Deadline(3600.0))
    turbo = rows[(sft, "turbotrain")]
    assert turbo["result"] == "ERROR" and turbo["note"] == "OutOfMemoryError: the test's"
    assert not {"rounds", "tokens/s", "vs stock", "MFU"} & set(turbo)  # its first round's would read as its own
    assert rows[(sft, "stock (sdpa)")]["rounds"] == 3


def test_a_peer_cut_by_the_budget_says_how_many_rounds_it_ran(monkeypatch):
    from types import SimpleNamespace

    from scripts.gpu_check_realshape import Workload, _run_workload

    measured = _faked_rounds(monkeypatch)
    deadline = SimpleNamespace(left=lambda: 100.0 if len(measured) < 3 else 0.0)  # time for 3 rounds of a peer
    sft = Workload("qwen2.5-0.5b", "sft")
    peers = ["stock (sdpa)", "turbotrain"]
    rows = {(sft, peer): {"est. s": "15"} for peer in peers}
    written = []
    _run_workload(sft, peers, rows, torch.device("cpu"), False, 3, 1.0, deadline, lambda: written.append(1))
    stock, turbo = (rows[(sft, peer)] for peer in peers)
    assert stock["rounds"] == 2 and stock["note"].startswith("2 of 3 rounds: time budget")
    assert turbo["rounds"] == 1 and turbo["note"].startswith("1 of 3 rounds: time budget")
    assert turbo["vs stock"] == "1.00x" and len(written) == 3  # the table written after every round


def test_the_heads_sections_fused_choices_stay_its_own(monkeypatch):
    from scripts import gpu_check_heads
    from turbotrain.passes.chunked_ce import fused_epilogue

    monkeypatch.setattr(fused_epilogue, "_chosen", {("a run's", 1): True})
    seen = []

    def choices(inputs, device):
        seen.append(dict(fused_epilogue._chosen))  # each shape starts as a fresh process does
        fused_epilogue._chosen[("the section's", len(seen))] = True
        raise RuntimeError("stop here")

    monkeypatch.setattr(gpu_check_heads, "_measured_choices", choices)
    monkeypatch.setattr(gpu_check_heads, "_inputs", lambda *args: None)  # not the published shapes' GBs
    rows = gpu_check_heads.head_rows(torch.device("cpu"), quick=False)
    assert seen == [{}, {}] and [row["result"] for row in rows] == ["ERROR", "ERROR"]  # both shapes: one row each
    assert fused_epilogue._chosen == {("a run's", 1): True}


def test_a_workload_none_of_whose_peers_could_start_is_not_built(monkeypatch):
    from scripts.gpu_check import Deadline
    from scripts.gpu_check_realshape import Workload, _run_workload

    from scripts import gpu_check_realshape

    monkeypatch.setattr(gpu_check_realshape, "build_model", lambda *a: pytest.fail("built"))
    sft = Workload("qwen2.5-0.5b", "sft")
    rows = {(sft, peer): {"est. s": "15"} for peer in ("stock (sdpa)", "turbotrain")}
    _run_workload(sft, ["stock (sdpa)", "turbotrain"], rows, torch.device("cpu"), False, 3, 1.0, Deadline(12.0))
    assert all(row["note"] == "0 of 3 rounds: time budget" for row in rows.values())


def test_the_liger_peers_patches_of_transformers_are_undone_after_it():
    from scripts.gpu_check_isolation import transformers_patches_undone
    from transformers.models.qwen2 import modeling_qwen2

    rotary, norm, forward = (
        modeling_qwen2.apply_rotary_pos_emb,
        modeling_qwen2.Qwen2RMSNorm,
        modeling_qwen2.Qwen2MLP.forward,
    )
    with transformers_patches_undone():  # what apply_liger_kernel_to_qwen2 does to the module and its classes
        modeling_qwen2.apply_rotary_pos_emb = lambda *args: args
        modeling_qwen2.Qwen2RMSNorm = torch.nn.Identity
        modeling_qwen2.Qwen2MLP.forward = lambda self, x: x
        modeling_qwen2.liger_added = True
    assert modeling_qwen2.apply_rotary_pos_emb is rotary and modeling_qwen2.Qwen2RMSNorm is norm
    assert modeling_qwen2.Qwen2MLP.forward is forward and not hasattr(modeling_qwen2, "liger_added")


@pytest.mark.slow
def test_the_cpu_pass_runs_every_realshape_row_without_an_error(tmp_path):
    """At one shape: the other's rows run the same code (its planning: the plan tests above; its model at tiny
    sizes: tests/bench/test_shapes.py)."""
    from scripts.gpu_check_realshape import plan

    shape = ("qwen2.5-0.5b",)
    report = quick_check(tmp_path / "realshape.md", "--only", "realshape", "--shapes", shape[0])
    assert "ERROR" not in report and "| FAIL" not in report
    bars = report.split("Against issue 45's bars")[1]
    assert "| qwen2.5-0.5b sft | >= 1.1x |" in bars and "| not judged (a quick run at toy sizes) |" in bars
    for workload, peer in plan(shape):
        assert f"| {workload.name} | {peer} | " in report
    for workload, peer in plan(shape)[:6]:  # every workload's stock and turbotrain trained 2 rounds and passed
        assert f"| {workload.name} | {peer} | 2 | " in report
    assert report.count(" | PASS | ") >= 16  # the peers that are installed here (not liger, not flash-attn)
    assert "llama3.2-1b" not in report


def test_the_xla_child_is_skipped_when_the_budget_cannot_hold_it():
    import importlib.util

    from scripts import gpu_check_parity

    if any(importlib.util.find_spec(p) is None for p in ("jax", "torchax", "optax")):
        pytest.skip("the xla extra is not installed")
    row = gpu_check_parity._xla_row(torch.device("cpu"), quick=False, timeout_s=5.0)
    assert row["result"] == "skipped" and row["note"] == "time budget: 5 s left"
