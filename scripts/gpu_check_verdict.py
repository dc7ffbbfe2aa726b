"""The published-shape rows against issue 45's bars, from one or more realshape reports (a first call and the
`--peers` calls after it): per workload, turbotrain's fastest row against the fastest peer, its peak memory
against the lowest peer's, and which peers were not measured.

    python scripts/gpu_check_verdict.py realshape.md realshape2.md realshape3.md

Bars: full and LoRA SFT (`* sft`, `* sft-lora`) at >= 1.1x the fastest peer's tokens/s with peak memory <= the
lowest peer's; DPO at >= 1.2x `trl defaults`. turbotrain's rows are the peers whose name holds "turbotrain" (its
fastest is the one judged); every other row that measured tokens/s is a peer. Both memory comparisons are given:
against every peer, and against the peers that train as turbotrain's row does (TRL's defaults turn gradient
checkpointing on: `trl defaults` is the like-for-like peer of `trl defaults + turbotrain`, and the other peers of
the other turbotrain rows). A row that FAILed its loss check or ERRORed counts for neither side. Where a peer
was not measured (a wheel missing, the budget), the verdict says so: "PASS" then holds for the peers that ran.
The realshape section of scripts/gpu_check.py appends this table for its own rows.
"""

from __future__ import annotations

import sys
from pathlib import Path

SPEED_BAR = {"sft": 1.1, "sft-lora": 1.1, "dpo": 1.2}
CHECKPOINTING = ("trl defaults",)  # peers with gradient checkpointing on (TRL's configs' default)


def verdict_rows(rows: list[dict], judged: bool = True) -> list[dict]:
    """One row per workload of `rows` (realshape rows: workload, peer, tokens/s, peak GiB, result); `judged`
    False (a `--quick` run at toy sizes): every column but the verdict, which says it is none."""
    workloads = list(dict.fromkeys(row["workload"] for row in rows))
    verdicts = [_verdict(name, [row for row in rows if row["workload"] == name]) for name in workloads]
    if not judged:
        for verdict in verdicts:
            verdict["verdict"] = "not judged (a quick run at toy sizes)"
    return verdicts


def _verdict(workload: str, rows: list[dict]) -> dict:
    kind = workload.rsplit(" ", 1)[-1]
    measured = [row for row in rows if _number(row.get("tokens/s")) and row.get("result") in ("PASS", "")]
    ours = [row for row in measured if "turbotrain" in row["peer"]]
    peers = [row for row in measured if "turbotrain" not in row["peer"]]
    if kind == "dpo":
        peers = [row for row in peers if row["peer"] == "trl defaults"]
    missing = sorted({row["peer"] for row in rows if "turbotrain" not in row["peer"]} - {r["peer"] for r in measured})
    verdict = {"workload": workload, "bar": f">= {SPEED_BAR.get(kind, 1.1)}x"}
    if not ours or not peers:
        return {
            **verdict,
            "verdict": "no verdict: " + ("no turbotrain row measured" if not ours else "no peer measured"),
        }
    best, fastest = (max(group, key=lambda row: _number(row["tokens/s"])) for group in (ours, peers))
    ratio = _number(best["tokens/s"]) / _number(fastest["tokens/s"])
    verdict.update({"turbotrain's fastest": best["peer"], "fastest peer": fastest["peer"], "speed": f"{ratio:.2f}x"})
    speed_ok = ratio >= SPEED_BAR.get(kind, 1.1)
    memory_ok = _memory(verdict, best, peers, kind)
    passed = speed_ok and memory_ok is not False
    verdict["verdict"] = ("PASS" if passed else "FAIL") + (f" (not measured: {', '.join(missing)})" if missing else "")
    return verdict


def _memory(verdict: dict, best: dict, peers: list[dict], kind: str) -> bool | None:
    """Fills the memory columns; whether `best` is at or under the lowest peer's peak (None: no peak measured)."""
    peak = _number(best.get("peak GiB"))
    peaks = [(row["peer"], _number(row.get("peak GiB"))) for row in peers if _number(row.get("peak GiB"))]
    if not peak or not peaks:
        verdict["peak GiB"] = "n/a"
        return None
    if kind == "dpo":
        like = peaks
    else:
        checkpointing = best["peer"].startswith(CHECKPOINTING)
        like = [(name, value) for name, value in peaks if name.startswith(CHECKPOINTING) == checkpointing] or peaks
    lowest, lowest_like = min(peaks, key=lambda item: item[1]), min(like, key=lambda item: item[1])
    verdict["peak GiB"] = f"{peak:.1f}"
    verdict["lowest peer"] = f"{lowest[1]:.1f} ({lowest[0]})"
    verdict["lowest like-for-like"] = f"{lowest_like[1]:.1f} ({lowest_like[0]})"
    return peak <= lowest[1]


def _number(text) -> float | None:
    try:
        return float(str(text).replace(",", "").rstrip("x"))
    except ValueError:
        return None


def report_rows(text: str) -> list[dict]:
    """The realshape rows of a report written by scripts/gpu_check.py (its markdown table)."""
    rows, columns = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            columns = None if not line.strip() else columns
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[:2] == ["workload", "peer"]:
            columns = cells
        elif columns and not set(line) <= set("|-"):
            rows.append(dict(zip(columns, cells)))
    return rows


def merged(reports: list[list[dict]]) -> list[dict]:
    """Rows of several calls: a row that measured replaces the same workload and peer's row of an earlier call
    (each call runs its workloads' stock again; rows of different calls were not interleaved with each other)."""
    kept: dict[tuple, dict] = {}
    for rows in reports:
        for row in rows:
            key = (row["workload"], row["peer"])
            if key not in kept or _number(row.get("tokens/s")):
                kept[key] = row
    return list(kept.values())


COLUMNS = [
    "workload", "bar", "turbotrain's fastest", "fastest peer", "speed", "peak GiB", "lowest peer",
    "lowest like-for-like", "verdict",
]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    paths = [Path(arg) for arg in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print("usage: python scripts/gpu_check_verdict.py REPORT.md [REPORT.md ...]", file=sys.stderr)
        return 2
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        print(f"gpu_check_verdict: no such report: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = merged([report_rows(path.read_text()) for path in paths])
    if not rows:
        print("gpu_check_verdict: no realshape table in these reports (written by gpu_check.py --only realshape)",
              file=sys.stderr)  # fmt: skip
        return 2
    print("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS))  # as gpu_check.markdown (which imports this)
    for verdict in verdict_rows(rows):
        print("| " + " | ".join(str(verdict.get(column, "")) for column in COLUMNS) + " |")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
