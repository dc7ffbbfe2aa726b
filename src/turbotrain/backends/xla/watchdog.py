"""A host lost mid-run stops the others with one message, instead of leaving them blocked in a collective.

When one host of a pod dies (killed, crashed, preempted), the others block in the step's next
collective: gloo and the TPU interconnect wait for the missing peer, and jax's coordination service
ends the processes only after its heartbeat limit, with a fatal log line and a C++ stack trace.

`HostWatchdog` (one daemon thread per host, several hosts only) keeps a beat counter per host in jax's
coordination key-value store, updated every `interval` seconds. A host whose counter has not moved for
`timeout` seconds of this thread's own running time is lost: the watchdog writes the loss under
the run's lost key for the others, prints one line naming the host and how to continue, and ends the process
with exit status `EXIT_HOST_LOST` (the main thread is blocked inside a collective and cannot be
unwound). A store that cannot be reached means the coordinator (host 0) is gone; jax's client usually
ends the process first then, with its own "Terminating process because the JAX distributed service
detected fatal errors" line. When the collective itself fails first (gloo sees the peer's connection
reset), the training loop stops the process the same way (`is_lost_peer`, `stop_process`).

A host whose loop ended normally writes `DONE` as its last beat (the others may still be saving the
final checkpoint). A gap in this thread's own beats longer than half the timeout (the process was descheduled) restarts
the clocks, so a stalled host does not declare the others lost. The store is reached through
`jax._src.distributed.global_state.client` (jax has no public handle to it); where that is missing the
watchdog is off and jax's heartbeat limit applies.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time

logger = logging.getLogger("turbotrain")
BEAT_KEY = "turbotrain/{run}/beat/{host}"
LOST_KEY = "turbotrain/{run}/lost"
DONE = "done"  # a host's last beat when its training loop ended normally: never judged lost after that
EXIT_HOST_LOST = 75
_runs = iter(range(1 << 30))  # every host trains its runs in the same order: the n-th watchdog is run n


def coordination_client():
    """jax's coordination-service client of this process, or None where jax does not expose it."""
    from turbotrain.boundaries.jax_boundary import coordination_client as client

    return client()


LOST_PEER_ERRORS = ("Gloo", "Connection reset", "Connection closed", "UNAVAILABLE", "DEADLINE_EXCEEDED")
_stopping = threading.Lock()


def lost_message(index: int, count: int, what: str) -> str:
    return (
        f"turbotrain xla: host {index} of {count} stops: {what}. Run the same command on every host with "
        "resume_from_checkpoint=True to continue from the last checkpoint."
    )


def is_lost_peer(error: BaseException) -> bool:
    """A collective failed because a peer went away (gloo's TCP pairs, the coordination service)."""
    return any(marker in str(error) for marker in LOST_PEER_ERRORS)


def stop_process(index: int, count: int, what: str) -> None:
    """Print the one message and end this process now (once, whichever thread comes first).

    `os._exit`: a normal exit would wait in jax's shutdown barrier for the lost host until the heartbeat
    limit, then abort with pages of coordination-service errors."""
    _stopping.acquire()
    sys.stderr.write(lost_message(index, count, what) + "\n")
    sys.stderr.flush()
    logging.shutdown()
    os._exit(EXIT_HOST_LOST)


class HostWatchdog:
    def __init__(self, client, index: int, count: int, timeout: float, interval: float | None = None):
        self.client = client
        self.index = index
        self.count = count
        self.timeout = timeout
        self.interval = interval if interval is not None else min(1.0, timeout / 10)
        run = next(_runs)
        self.lost_key = LOST_KEY.format(run=run)
        self.beat_keys = {host: BEAT_KEY.format(run=run, host=host) for host in range(count)}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="turbotrain-host-watchdog", daemon=True)

    def __enter__(self) -> HostWatchdog:
        self._thread.start()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5 * self.interval)
        if exc_type is None:
            try:
                self.client.key_value_set(self.beat_keys[self.index], DONE, allow_overwrite=True)
            except Exception:
                logger.debug("turbotrain xla: could not mark this host's loop as done", exc_info=True)

    def _read(self, key: str) -> str | None:
        try:
            return self.client.key_value_try_get(key)
        except Exception as error:  # jax raises its runtime error for a key not written yet
            if "NOT_FOUND" in str(error):
                return None
            raise

    def _run(self) -> None:
        beat, last_tick = 0, time.monotonic()
        heard = {host: (None, last_tick) for host in range(self.count) if host != self.index}
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            if now - last_tick > self.timeout / 2:  # this thread was starved: nobody is judged on that gap
                heard = {host: (value, now) for host, (value, _) in heard.items()}
            last_tick, beat = now, beat + 1
            try:
                self.client.key_value_set(self.beat_keys[self.index], str(beat), allow_overwrite=True)
                reported = self._read(self.lost_key)
                if reported is not None:
                    self._stop_process(reported)
                for host, (value, since) in heard.items():
                    current = self._read(self.beat_keys[host])
                    if current == DONE:
                        continue
                    if current != value:
                        heard[host] = (current, now)
                    elif now - since > self.timeout:
                        self._report_lost(host, now - since)
            except Exception as error:
                self._stop_process(f"the pod's coordinator (host 0) cannot be reached ({type(error).__name__})")

    def _report_lost(self, host: int, silent_for: float) -> None:
        what = f"host {host} has not been heard from for {silent_for:.0f} s (killed, hung, crashed or preempted)"
        try:
            self.client.key_value_set(self.lost_key, what, allow_overwrite=True)
            time.sleep(3 * self.interval)  # the others read it before this host (maybe the coordinator) goes
        except Exception:
            pass
        self._stop_process(what)

    def _stop_process(self, what: str) -> None:
        stop_process(self.index, self.count, what)


def watch_hosts(hosts, timeout: float):
    """A started-on-enter watchdog for a pod of several hosts, or a context that does nothing."""
    client = coordination_client() if hosts.several else None
    if client is None:
        if hosts.several:
            logger.warning("turbotrain xla: jax's coordination client is not reachable; no host watchdog")
        return contextlib.nullcontext()
    return HostWatchdog(client, hosts.index, hosts.count, timeout)
