"""One peer's segment in a process of its own (`turbotrain bench --isolate`).

The interleaved runner (runner.py) trains every peer in the one bench process, one segment after another.
Two things that process cannot give: room for peers that do not fit side by side (a full fine-tune of a
0.5B-parameter model with its reference copy holds ~8 GB of weights, gradients and AdamW state per peer; what
one segment leaves to the allocator is in the next one's process), and a start-memory figure of a process
that has trained nothing before (what a user's own run sees). With `--isolate` each (round, peer) segment
runs in a fresh child process (multiprocessing, "spawn": nothing inherited but what is passed): the same
workload, the same data (pickled across), the initial model loaded from the runner's spilled file, its own
`PeakMemory`. The child sends back its `Segment` and what the peer reported (backend, passes); the order stays
interleaved (A B A B ...), so pairing, medians and ratios are the runner's, unchanged.

What changes in the figures: peak memory and memory at start are each the child process's own (its
interpreter, libraries and the unpickled data included, the same for every peer), not a shared process's;
the backend report is the last round's (a child does not see earlier rounds'). A child that dies (killed for
memory, a crash) is an error naming the peer, the round and its exit code, never a missing row.
"""

from __future__ import annotations

import multiprocessing
import traceback
from dataclasses import dataclass, field

from turbotrain.bench.initial_model import ModelFile


@dataclass
class SegmentResult:
    """What a child sends back: its one segment and the peer's report (runner.PeerRuns's other fields)."""

    segment: object  # runner.Segment
    backend: str = ""
    passes: list[str] = field(default_factory=list)
    backend_report: dict = field(default_factory=dict)


def run_segment_isolated(workload, peer: str, initial: ModelFile, data, device, round_index: int) -> SegmentResult:
    """Run `peer`'s segment of `workload` in a child process and return what it measured."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(workload, peer, initial, data, device, send), daemon=True)
    child.start()
    send.close()  # the child holds the sending end now: its exit closes the pipe
    try:
        outcome = receive.recv()
    except EOFError:
        outcome = None
    child.join()
    where = f"the '{peer}' peer's segment (round {round_index + 1}) in a process of its own"
    if outcome is None:
        cause = " (killed: out of memory?)" if child.exitcode in (-9, 137) else ""
        raise RuntimeError(f"{where} ended with exit code {child.exitcode}{cause} before sending its result")
    if isinstance(outcome, str):
        raise RuntimeError(f"{where} failed:\n{outcome}")
    return outcome


def _child(workload, peer: str, initial: ModelFile, data, device, send) -> None:
    from turbotrain.bench.runner import PeerRuns, run_segment
    from turbotrain.measure.memory import PeakMemory

    try:
        runs = PeerRuns(peer)
        run_segment(workload, peer, initial, data, runs, PeakMemory(device))
        send.send(SegmentResult(runs.segments[0], runs.backend, runs.passes, runs.backend_report))
    except BaseException:  # noqa: BLE001 - any failure goes back to the parent as its traceback
        send.send(traceback.format_exc())
    finally:
        send.close()
