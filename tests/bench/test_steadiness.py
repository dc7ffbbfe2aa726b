"""One story per bench run (bench/steadiness.py): the ratio is the throughput columns' ratio, each peer's spread is
shown, and a disturbed run says so; injected step times and load, no timing."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from turbotrain.bench.counting import BatchCount
from turbotrain.bench.report import markdown, rows, write_reports
from turbotrain.bench.runner import PeerRuns, Segment, summarize
from turbotrain.bench.steadiness import disturbances, round_ratios, total_ratio, worst_repeat

WORKLOAD = SimpleNamespace(
    task="cls",
    reference="stock",
    warmup=1,
    unit="tokens",
    apart="",
    title=lambda: "injected",
    describe=lambda: {"rounds": 2, "steps": 3, "warmup": 1},
    command=lambda: "turbotrain bench --task cls --rounds 2 --steps 3",
)
TOKENS = (10, 400, 40)  # natural lengths: batches of very different sizes
COUNTS = [BatchCount(2, t, t, 0, 0) for t in (10, *TOKENS)]


def peer(name: str, *rounds: list[float]) -> PeerRuns:
    return PeerRuns(name, [Segment([1.0, *seconds], [0.5] * 4, COUNTS, (False, False)) for seconds in rounds])


def result_of(stock: PeerRuns, turbo: PeerRuns, other_cores: float | None = 0.0) -> dict:
    return summarize(WORKLOAD, {"stock": stock, "turbo": turbo}, "rss", other_cores=other_cores)


def test_the_ratio_is_the_throughput_columns_ratio_on_natural_lengths():
    stock = peer("stock", [0.1, 4.0, 0.4], [0.1, 4.2, 0.4])
    turbo = peer("turbo", [0.2, 2.0, 0.4], [0.2, 2.1, 0.4])  # slower on the small batch, faster on the big one
    turbo_row = result_of(stock, turbo)["peers"]["turbo"]
    assert turbo_row["ratio"] == pytest.approx(
        turbo_row["tokens_per_s"] / result_of(stock, turbo)["peers"]["stock"]["tokens_per_s"]
    )
    assert turbo_row["ratio"] == pytest.approx(9.2 / 5.3)
    assert turbo_row["paired_median_ratio"] == pytest.approx(1.0)  # the old statistic told another story
    assert turbo_row["ratio_rounds"] == pytest.approx([4.5 / 2.6, 4.7 / 2.7])


def test_rounds_of_unequal_length_pair_only_their_common_steps():
    assert total_ratio([[9.0, 1.0], [9.0, 2.0, 2.0]], [[9.0, 2.0, 2.0], [9.0, 4.0, 4.0]], warmup=1) == 2.0
    assert round_ratios([[9.0, 1.0]], [[9.0, 3.0, 3.0]], warmup=1) == [3.0]


def test_a_quiet_run_prints_no_warning(tmp_path):
    stock = peer("stock", [0.1, 4.0, 0.4], [0.11, 4.1, 0.41], [0.1, 3.9, 0.4], [0.1, 4.0, 0.42])
    turbo = peer("turbo", [0.05, 2.0, 0.2], [0.05, 2.1, 0.21], [0.06, 2.0, 0.2], [0.05, 1.9, 0.2])
    result = result_of(stock, turbo, other_cores=0.1)
    assert result["reliable"] and result["disturbed"] == []
    out = io.StringIO()
    write_reports(result, tmp_path, Console(file=out, width=300))
    assert "UNRELIABLE" not in out.getvalue()
    assert "UNRELIABLE" not in markdown(result) and not any(cell.endswith("?") for row in rows(result) for cell in row)
    assert "x stock: its seconds over the peer's" in markdown(result)


def test_a_stalled_step_marks_the_run_unreliable_everywhere(tmp_path):
    # the run: quiet steps of 0.02-0.03 s, stalls of ~0.9 s (stock) and ~2.1 s (turbo)
    stock = peer("stock", [0.03, 0.03, 0.9], [0.03, 0.03, 0.03])
    turbo = peer("turbo", [0.02, 2.1, 0.02], [0.02, 0.02, 0.02])
    result = result_of(stock, turbo)
    assert not result["reliable"]
    assert any("turbo's measured step 2 took 2.100, 0.020 s" in reason for reason in result["disturbed"])
    assert any("stock's measured step 3" in reason for reason in result["disturbed"])
    turbo_cells = rows(result)[1]
    assert turbo_cells[3].endswith("x?") and "0.020-2.100" in turbo_cells
    out = io.StringIO()
    write_reports(result, tmp_path, Console(file=out, width=300))
    assert "UNRELIABLE (ratios marked ?)" in out.getvalue() and "UNRELIABLE" in (tmp_path / "bench.md").read_text()
    assert '"reliable": false' in (tmp_path / "bench.json").read_text()


def test_other_processes_cpu_time_marks_the_run_unreliable():
    steady = [0.1, 0.1, 0.1]
    result = result_of(peer("stock", steady, steady), peer("turbo", steady, steady), other_cores=1.9)
    assert not result["reliable"] and "other processes kept 1.9 of" in result["disturbed"][0]


def test_one_round_measures_no_repeat_spread_and_unknown_load_is_not_a_disturbance():
    assert worst_repeat([[1.0, 0.1, 5.0]], warmup=1) is None
    assert disturbances({"turbo": [[1.0, 0.1, 5.0]]}, warmup=1, other_cores=None, usable_cores=2) == []
