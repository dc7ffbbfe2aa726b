"""Re-run issue 14's fault and bad-input probes and print what each ended in, as markdown.

    python scripts/reliability.py [--only KIND ...] [--out benchmarks/DATE-reliability.md]

Run from the repository root with turbotrain importable (it reuses the test suite's tiny models and
kill-and-resume worker). Every probe states the outcome it should have; what it got is one of:

  clear message    refused with one line naming the cause (no traceback)
  right behaviour  the right thing happened (resumed exactly, fell back to a good checkpoint, ...)
  traceback        a raw exception or traceback, or a message that does not name the cause
  silent wrong     no error, but a wrong result (a bad input accepted, a NaN model saved, ...)
  data lost        something that was on disk is gone or overwritten
  skipped          cannot be tried here (the note says why)

Kinds: kill (SIGKILL in subprocesses, then resume: scripts/reliability_training.py), checkpoint
(damaged checkpoints, same file), export, ondevice, args, passes (scripts/reliability_inputs.py),
pretrain (subprocesses: scripts/reliability_pretrain.py). About 5 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.reliability_common import OUTCOMES, TRACEBACK, Probe  # noqa: E402
from scripts.reliability_inputs import args_probes, export_probes, ondevice_probes  # noqa: E402
from scripts.reliability_pretrain import pretrain_probes  # noqa: E402
from scripts.reliability_training import checkpoint_probes, kill_probes  # noqa: E402

KINDS = {
    "args": args_probes,
    "checkpoint": checkpoint_probes,
    "export": export_probes,
    "ondevice": ondevice_probes,
    "kill": kill_probes,
    "pretrain": pretrain_probes,
}


def run_probes(probes: list[Probe], scratch: Path) -> list[tuple[Probe, str, str, float]]:
    rows = []
    for number, probe in enumerate(probes):
        folder = scratch / probe.kind / f"{number:03d}"
        folder.mkdir(parents=True)
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outcome, note = probe.run(folder)
        except Exception as error:  # noqa: BLE001 - a probe that breaks is reported, the others go on
            outcome, note = TRACEBACK, f"probe raised {type(error).__name__}: {str(error)[:100]}"
            traceback.print_exc()
        seconds = time.perf_counter() - start
        mark = "ok " if outcome == probe.expected else "NO "
        print(f"{mark} {probe.kind:<10} {probe.name:<60} {outcome:<15} {seconds:5.1f} s", file=sys.stderr, flush=True)
        rows.append((probe, outcome, note.replace(str(folder), "<tmp>").replace("|", "/"), seconds))
    return rows


def markdown(rows) -> str:
    lines = ["| probe kind | count | " + " | ".join(OUTCOMES) + " | as expected |", "|---" * (len(OUTCOMES) + 3) + "|"]
    for kind in dict.fromkeys(probe.kind for probe, *_ in rows):
        got = Counter(outcome for probe, outcome, *_ in rows if probe.kind == kind)
        expected = sum(outcome == probe.expected for probe, outcome, *_ in rows if probe.kind == kind)
        lines.append(
            f"| {kind} | {sum(got.values())} | "
            + " | ".join(str(got[o]) for o in OUTCOMES)
            + f" | {expected}/{sum(got.values())} |"
        )
    total = Counter(outcome for _, outcome, *_ in rows)
    lines.append(
        f"| **all** | {len(rows)} | "
        + " | ".join(str(total[o]) for o in OUTCOMES)
        + f" | {sum(o == p.expected for p, o, *_ in rows)}/{len(rows)} |"
    )
    lines += ["", "| kind | probe | expected | got | note | s |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {p.kind} | {p.name} | {p.expected} | {'' if o == p.expected else '**'}{o}"
        f"{'' if o == p.expected else '**'} | {note} | {s:.1f} |"
        for p, o, note, s in rows
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(KINDS), default=list(KINDS), metavar="KIND")
    parser.add_argument("--out", default=None, help="also write the markdown to this file")
    ns = parser.parse_args(argv)
    probes = [probe for kind in ns.only for probe in KINDS[kind]()]
    with tempfile.TemporaryDirectory(prefix="turbotrain-reliability-") as scratch:
        rows = run_probes(probes, Path(scratch))
    table = markdown(rows)
    print(table)
    if ns.out:
        Path(ns.out).write_text(table)
    return 0 if all(outcome == probe.expected for probe, outcome, *_ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
