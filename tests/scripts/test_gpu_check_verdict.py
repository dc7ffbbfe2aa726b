"""scripts/gpu_check_verdict.py: the realshape rows judged against issue 45's bars, from one or several reports."""

from __future__ import annotations

from scripts.gpu_check import markdown
from scripts.gpu_check_realshape import COLUMNS
from scripts.gpu_check_verdict import main, merged, report_rows, verdict_rows


def row(workload, peer, tokens, peak, result="PASS"):
    return {"workload": workload, "peer": peer, "tokens/s": f"{tokens:,}", "peak GiB": f"{peak:.1f}", "result": result}


SFT = "qwen2.5-0.5b sft"


def test_the_fastest_turbotrain_row_against_the_fastest_peer_and_the_lowest_peak():
    rows = [
        row(SFT, "stock (sdpa)", 10_000, 30.0),
        row(SFT, "turbotrain", 24_000, 17.0),
        row(SFT, "stock + flattening", 20_000, 22.0),
        row(SFT, "trl defaults", 12_000, 10.0),
        row(SFT, "trl defaults + turbotrain", 18_000, 9.5),
    ]
    (verdict,) = verdict_rows(rows)
    assert verdict["turbotrain's fastest"] == "turbotrain" and verdict["fastest peer"] == "stock + flattening"
    assert verdict["speed"] == "1.20x"
    assert verdict["lowest peer"] == "10.0 (trl defaults)"  # TRL checkpoints: under the plain turbotrain row
    assert verdict["lowest like-for-like"] == "22.0 (stock + flattening)"
    assert verdict["verdict"] == "FAIL"  # 17.0 GiB > 10.0: the bar is the lowest peer's, whoever it is


def test_slower_than_the_bar_fails_and_missing_peers_are_named():
    rows = [
        row(SFT, "stock (sdpa)", 10_000, 30.0),
        row(SFT, "turbotrain", 10_500, 9.0),
        row(SFT, "liger", 10_000, 25.0),
        {"workload": SFT, "peer": "stock (flash_attention_2)", "result": "n/a", "note": "flash-attn not installed"},
    ]
    (verdict,) = verdict_rows(rows)
    assert verdict["speed"] == "1.05x" and verdict["verdict"].startswith("FAIL")
    assert "not measured: stock (flash_attention_2)" in verdict["verdict"]
    rows[1] = row(SFT, "turbotrain", 11_500, 9.0)
    assert verdict_rows(rows)[0]["verdict"] == "PASS (not measured: stock (flash_attention_2))"


def test_dpo_is_judged_against_trls_defaults_and_failed_rows_count_for_neither_side():
    dpo = "llama3.2-1b dpo"
    rows = [row(dpo, "trl defaults", 1_000, 20.0), row(dpo, "turbotrain", 1_250, 15.0), row(dpo, "liger", 2_000, 12.0)]
    (verdict,) = verdict_rows(rows)
    assert verdict["fastest peer"] == "trl defaults" and verdict["verdict"] == "PASS"
    rows[1]["result"] = "FAIL"
    assert verdict_rows(rows)[0]["verdict"] == "no verdict: no turbotrain row measured"


def test_reports_are_read_back_and_merged_across_calls(tmp_path, capsys):
    first = [row(SFT, "stock (sdpa)", 10_000, 30.0), row(SFT, "turbotrain", 25_000, 9.0),
             {"workload": SFT, "peer": "trl defaults", "result": "skipped", "note": "skipped: time budget"}]  # fmt: skip
    second = [row(SFT, "stock (sdpa)", 11_000, 30.0), row(SFT, "trl defaults", 20_000, 8.0)]
    paths = []
    for index, rows in enumerate((first, second)):
        path = tmp_path / f"realshape{index}.md"
        path.write_text(f"# report\n\n## Published shapes\n\n{markdown(rows, COLUMNS)}\n1 failing row(s)\n")
        paths.append(path)
    assert report_rows(paths[0].read_text())[1]["tokens/s"] == "25,000"
    rows = merged([report_rows(path.read_text()) for path in paths])
    assert {r["peer"]: r["tokens/s"] for r in rows} == {
        "stock (sdpa)": "11,000", "turbotrain": "25,000", "trl defaults": "20,000"}  # fmt: skip
    assert main([str(path) for path in paths]) == 0
    out = capsys.readouterr().out
    assert "| qwen2.5-0.5b sft | >= 1.1x | turbotrain | trl defaults | 1.25x | 9.0 | 8.0 (trl defaults) |" in out
    assert out.rstrip().endswith("| FAIL |")  # 9.0 GiB over TRL's 8.0


def test_a_missing_report_or_one_without_the_table_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "realshape.md")]) == 2
    assert capsys.readouterr().err.strip() == f"gpu_check_verdict: no such report: {tmp_path / 'realshape.md'}"
    (tmp_path / "kernels.md").write_text("# report\n\n| shape | kernel |\n|---|---|\n| qwen2.5-0.5b | flex |\n")
    assert main([str(tmp_path / "kernels.md")]) == 2
    assert "no realshape table" in capsys.readouterr().err
