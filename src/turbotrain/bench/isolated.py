"""A function called in a process of its own, for `turbotrain bench --isolate` (runner.py).

The interleaved runner trains every peer in the one bench process, one segment after another. Two things that
process cannot give: room for peers that do not fit side by side (a full fine-tune of a 0.5B-parameter model
with its reference copy holds ~10 GB of weights, gradients and AdamW state per peer), and a start-memory figure
of a process that has trained nothing before (what a user's own run sees). With `--isolate` the runner calls its
segment function through `call_in_process`: a fresh child process (multiprocessing, "spawn": nothing inherited
but the pickled function and arguments) runs it and sends back what it returns.

Contract: the function and its arguments must pickle (module-level functions; the runner passes the initial
model as its file, `initial_model.ModelFile`); its return value comes back pickled. A failure in the child is a
`RuntimeError` carrying the child's traceback; a child that dies without answering (killed for memory, a crash)
is a `RuntimeError` naming its exit code. `where` names the call in both messages.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from typing import Any


def call_in_process(function: Callable[..., Any], *args: Any, where: str) -> Any:
    """`function(*args)` run in a fresh child process; its return value, or a RuntimeError naming `where`."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(function, args, send), daemon=True)
    child.start()
    send.close()  # the child holds the sending end now: its exit closes the pipe
    try:
        answer = receive.recv()
    except EOFError:
        answer = None
    child.join()
    if answer is None:
        cause = " (killed: out of memory?)" if child.exitcode in (-9, 137) else ""
        raise RuntimeError(f"{where} ended with exit code {child.exitcode}{cause} before sending its result")
    failed, value = answer
    if failed:
        raise RuntimeError(f"{where} failed:\n{value}")
    return value


def _child(function: Callable[..., Any], args: tuple, send) -> None:
    try:
        answer = (False, function(*args))
    except BaseException:  # noqa: BLE001 - any failure goes back to the parent as its traceback
        answer = (True, traceback.format_exc())
    try:
        send.send(answer)
    finally:
        send.close()
