"""hosts.py and watchdog.py without a pod: the launch read from the environment, the per-step agreement,
Trainer's process index, and the watchdog's judgement of a silent host (against an in-memory store)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.requires_xla

from turbotrain.backends.xla import hosts as hosts_module  # noqa: E402
from turbotrain.backends.xla import watchdog  # noqa: E402
from turbotrain.backends.xla.hosts import Hosts, Launch, claim_process_index, launch_environment  # noqa: E402


@pytest.fixture
def no_tpu(monkeypatch):
    monkeypatch.setattr(hosts_module.importlib.util, "find_spec", lambda name: None)


def test_jax_variables_launch_a_pod(no_tpu):
    environ = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3"}
    assert launch_environment(environ) == Launch("10.0.0.1:1234", 4, 3, "JAX_* variables")
    with pytest.raises(ValueError, match="JAX_PROCESS_ID"):
        launch_environment({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "4"})


def test_torchrun_variables_put_the_coordinator_next_to_torchs_port(no_tpu):
    environ = {"MASTER_ADDR": "node0", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "1"}
    assert launch_environment(environ) == Launch("node0:29501", 2, 1, "torchrun variables")
    assert launch_environment({**environ, "WORLD_SIZE": "1"}) is None  # one process: no pod
    assert launch_environment({}) is None


def test_a_cloud_tpu_vm_lets_jax_find_the_slice(monkeypatch):
    monkeypatch.setattr(hosts_module.importlib.util, "find_spec", lambda name: object() if name == "libtpu" else None)
    assert launch_environment({}) == Launch(None, None, None, "Cloud TPU VM")


def test_one_host_agrees_with_itself_without_a_collective():
    assert Hosts().agree(37, 5, 12, items_are_global=False) == (37, 5, 12)
    assert Hosts().agree(37, 5, None, items_are_global=False) == (37, 5, 0)


def test_hosts_take_the_longest_length_the_most_rows_and_the_sum_of_items(monkeypatch):
    from jax.experimental import multihost_utils

    every = np.asarray([[30, 7, 12], [40, 5, 9]], dtype=np.int32)
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda mine: every)
    assert Hosts(2, 0).agree(30, 7, 12, items_are_global=False) == (40, 7, 21)
    assert Hosts(2, 0).agree(30, 7, 12, items_are_global=True) == (40, 7, 12)  # torchrun: Trainer gathered


def test_trainer_without_torch_distributed_learns_the_hosts_rank():
    args = SimpleNamespace(world_size=1, process_index=0, distributed_state=SimpleNamespace(process_index=0))
    claim_process_index(args, Hosts(2, 1))
    assert args.distributed_state.process_index == 1
    torchrun = SimpleNamespace(world_size=4, process_index=1)
    with pytest.raises(ValueError, match="one process per host"):
        claim_process_index(torchrun, Hosts(2, 1))


class Store:
    """jax's coordination key-value store, in memory: a missing key raises NOT_FOUND as jax does."""

    def __init__(self):
        self.values, self.broken = {}, False

    def key_value_set(self, key, value, allow_overwrite=False):
        if self.broken:
            raise RuntimeError("UNAVAILABLE: Socket closed")
        self.values[key] = value

    def key_value_try_get(self, key):
        if self.broken:
            raise RuntimeError("UNAVAILABLE: Socket closed")
        if key not in self.values:
            raise RuntimeError(f"NOT_FOUND: Config key {key} not found.")
        return self.values[key]


def watched(monkeypatch, store, peer_beats, seconds=1.0):
    """Run host 0's watchdog for `seconds` while `peer_beats(elapsed)` says whether host 1 beats; the messages."""
    stops = []
    monkeypatch.setattr(watchdog, "stop_process", lambda index, count, what: stops.append(what))
    dog = watchdog.HostWatchdog(store, 0, 2, timeout=0.3, interval=0.02)
    peer = dog.beat_keys[1]
    start, beat = time.monotonic(), 0
    with dog:
        while (elapsed := time.monotonic() - start) < seconds:
            value = peer_beats(elapsed, beat)
            if value is not None:
                beat += 1
                store.key_value_set(peer, value)
            time.sleep(0.02)
    return stops


def test_a_host_that_keeps_beating_is_never_lost(monkeypatch):
    assert watched(monkeypatch, Store(), lambda elapsed, beat: str(beat)) == []


def test_a_silent_host_is_lost_after_the_timeout(monkeypatch):
    store = Store()
    stops = watched(monkeypatch, store, lambda elapsed, beat: str(beat) if elapsed < 0.2 else None)
    assert stops and "host 1 has not been heard from" in stops[0]
    assert any(key.endswith("/lost") for key in store.values)  # told the other hosts before going


def test_a_host_whose_loop_ended_is_not_lost(monkeypatch):
    stops = watched(monkeypatch, Store(), lambda elapsed, beat: str(beat) if elapsed < 0.2 else watchdog.DONE)
    assert stops == []


def test_an_unreachable_store_means_the_coordinator_is_gone(monkeypatch):
    store = Store()
    threading.Timer(0.2, lambda: setattr(store, "broken", True)).start()
    stops = watched(monkeypatch, store, lambda elapsed, beat: None if store.broken else str(beat), seconds=0.6)
    assert stops and "coordinator (host 0) cannot be reached" in stops[0]


def test_the_message_says_how_to_continue():
    message = watchdog.lost_message(0, 2, "host 1 has not been heard from for 60 s")
    assert message.startswith("turbotrain xla: host 0 of 2 stops: host 1") and "resume_from_checkpoint=True" in message


def test_jaxs_heartbeat_limit_leaves_the_watchdog_room():
    assert hosts_module.jax_heartbeat_s(10) == 100  # jax may see a last heartbeat seconds before a host stops
    assert hosts_module.jax_heartbeat_s(60) == 210
