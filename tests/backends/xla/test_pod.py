"""backend="xla" on a pod of 2 hosts x 2 devices, simulated on this machine as a pod would run: one process
per host on 127.0.0.1, CPU collectives through gloo, 2 simulated devices each (pod_worker.py).

* The 2-host runs (launched with JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID, each host
  loading only its rows) give the losses and evaluation losses of 1 host x 4 devices and of stock Trainer
  at the same global batch of 8 (RoBERTa MLM with label sparsity, GPT-2; 10 steps, dropout 0).
* shard="fsdp" gives the same losses with 1/4 of the parameter + AdamW bytes per device, launched both
  ways: JAX_* variables (RoBERTa) and `torchrun --nnodes=2` (GPT-2, Trainer under torch.distributed,
  whose evaluation is compared with stock DDP's in the same launch).
* The 2-host run's checkpoint resumes on 1 host x 1 device and on eager with the uninterrupted losses.
* Host 1 killed after step 7 makes host 0 exit at once with one message (status 75), and the same
  command with resume_from_checkpoint=True continues with the uninterrupted losses; host 1 hung
  (SIGSTOP: its connections stay open, so only the watchdog can tell) stops host 0 after
  host_timeout_s with the same one message.
* bf16=True: the compiled matmuls are bf16 and the losses within 2e-2 of stock bf16 autocast.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainer_helpers import assert_losses_close

pytestmark = pytest.mark.requires_xla

ROOT = Path(__file__).resolve().parents[3]
RTOL = 1e-4
BF16_RTOL = 2e-2
EXIT_HOST_LOST = 75
GROUP_TIMEOUT_S = 420
STOP_MESSAGE = "turbotrain xla: host 0 of 2 stops"


def free_port(pairs: bool = False) -> int:
    """A free 127.0.0.1 port (and, with `pairs`, the next one free too: torchrun's jax coordinator)."""
    while True:
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            if not pairs:
                return port
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port


def environment(devices: int, **extra) -> dict:
    python_path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {
        **os.environ,
        "PYTHONPATH": python_path,
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        **extra,
    }


def start(out: Path, group: str, runs: list[str], env: dict, name: str, prefix=()) -> subprocess.Popen:
    log = open(out / f"{group}-{name}.log", "w")  # noqa: SIM115 (closed by the process's end)
    command = [*prefix, "-m", "tests.backends.xla.pod_worker", str(out), group, *runs]
    return subprocess.Popen(
        [sys.executable, *command], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True
    )


def finish(processes: list[subprocess.Popen]) -> list[dict]:
    """Wait for every process; exit status and end time of each. Past the group's time limit all are killed;
    once one has stopped for a lost host, the rest (a hung host) are killed, as a cluster scheduler would."""
    deadline = time.time() + GROUP_TIMEOUT_S
    ended = [None] * len(processes)
    while any(status is None for status in ended):
        for index, process in enumerate(processes):
            if ended[index] is None and process.poll() is not None:
                ended[index] = {"returncode": process.returncode, "ended": time.time()}
        if time.time() > deadline or any(s and s["returncode"] == EXIT_HOST_LOST for s in ended):
            for process in processes:
                if process.poll() is None:
                    process.kill()
        time.sleep(0.2)
    return ended


def pod(out: Path, group: str, runs: list[str], torchrun: bool = False) -> list[dict]:
    """Two hosts x 2 devices, launched with jax's variables or with `torchrun --nnodes=2`."""
    port = free_port(pairs=torchrun)
    processes = []
    for host in range(2):
        env = environment(2, POD_DEVICES="4")
        prefix: tuple = ()
        if torchrun:
            prefix = ("-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={host}", "--nproc-per-node=1")
            prefix += ("--master-addr=127.0.0.1", f"--master-port={port}")
        else:
            env.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(host))
        processes.append(start(out, group, runs, env, f"host{host}", prefix))
    return finish(processes)


def one_host(out: Path, group: str, runs: list[str]) -> list[dict]:
    return finish([start(out, group, runs, environment(4), "host0")])


def log_text(out: Path, group: str, host: int) -> str:
    return (out / f"{group}-host{host}.log").read_text()


def results_of(out: Path, group: str, host: int = 0) -> dict:
    path = out / f"{group}-host{host}.json"
    assert path.exists(), log_text(out, group, host)[-6000:]
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("pod")
    launched = {
        "pod": pod(out, "pod", ["roberta", "gpt2", "gpt2_killed"]),
        "one": one_host(
            out,
            "one",
            [
                *("stock_roberta", "stock_gpt2", "xla4_roberta", "xla4_gpt2", "resumed_xla1", "resumed_eager"),
                *("stock_bf16", "xla_bf16", "bf16_matmuls"),
            ],
        ),
        "again": pod(out, "again", ["gpt2_killed_resumed", "roberta_fsdp", "gpt2_hung"]),
        "torchrun": pod(out, "torchrun", ["gpt2_fsdp", "stock_gpt2"], torchrun=True),
    }
    for group in ("one", "torchrun"):
        assert [p["returncode"] for p in launched[group]] == [0] * len(launched[group]), log_text(out, group, 0)[-6000:]
    results = {group: results_of(out, group) for group in launched}
    results["pod_host1"] = results_of(out, "pod", 1)
    return {"out": out, "launched": launched, **results}


@pytest.mark.parametrize("family", ["roberta", "gpt2"])
def test_two_hosts_give_the_losses_of_one_host_and_of_stock_trainer(runs, family):
    pod_run, one = runs["pod"][family], runs["one"]
    assert runs["pod"]["pod"] == {"hosts": 2, "devices_per_host": 2, "process": 0}
    assert pod_run["report"]["hosts"] == 2 and pod_run["report"]["devices"] == 4
    assert len(pod_run["losses"]) == 10 and len(pod_run["eval"]) == 2
    for reference in (one[f"xla4_{family}"], one[f"stock_{family}"]):
        assert_losses_close(pod_run["losses"], reference["losses"], rtol=RTOL)
        assert_losses_close(pod_run["eval"], reference["eval"], rtol=RTOL)
    assert_losses_close(pod_run["grad_norms"], one[f"stock_{family}"]["grad_norms"], rtol=1e-3)
    assert runs["pod_host1"][family]["losses"] == pod_run["losses"]  # every host logs the global loss
    assert pod_run["report"]["compiles"] == pod_run["report"]["compiled_shapes"] == 1


def test_only_host_0_writes_checkpoints(runs):
    assert runs["pod"]["gpt2"]["saved"] == ["checkpoint-10", "checkpoint-5"]
    assert "Writing model shards" not in log_text(runs["out"], "pod", 1)  # save_pretrained ran on host 0 only


@pytest.mark.parametrize(
    ("group", "run", "family"), [("again", "roberta_fsdp", "roberta"), ("torchrun", "gpt2_fsdp", "gpt2")]
)
def test_fsdp_gives_the_same_losses_with_a_quarter_of_the_state_per_device(runs, group, run, family):
    sharded, replicated = runs[group][run], runs["pod"][family]
    assert sharded["report"]["shard"] == "fsdp" and sharded["report"]["hosts"] == 2
    assert_losses_close(sharded["losses"], runs["one"][f"stock_{family}"]["losses"], rtol=RTOL)
    held, whole = sharded["report"]["state_bytes_per_device"], replicated["report"]["state_bytes_per_device"]
    print(
        f"\n{family} 2 hosts x 2 devices, parameters + AdamW per device: replicated {whole:,} B, fsdp {held:,} B "
        f"({held / whole:.3f}); median step {replicated['median_step_s']:.3f} s vs {sharded['median_step_s']:.3f} s "
        f"(1 host x 4 devices: {runs['one'][f'xla4_{family}']['median_step_s']:.3f} s; simulated devices share the CPU)"
    )
    assert whole == replicated["report"]["state_bytes_replicated"]
    assert held <= 1.02 * whole / 4


def test_torchrun_launch_evaluates_like_stock_ddp(runs):
    launched = runs["torchrun"]
    assert launched["pod"]["hosts"] == 2
    assert_losses_close(launched["stock_gpt2"]["losses"], runs["one"]["stock_gpt2"]["losses"], rtol=RTOL)
    # Trainer evaluates under torch.distributed itself (token-weighted over the processes), as stock DDP does
    assert_losses_close(launched["gpt2_fsdp"]["eval"], launched["stock_gpt2"]["eval"], rtol=RTOL)


@pytest.mark.parametrize("run", ["resumed_xla1", "resumed_eager"])
def test_the_pods_checkpoint_resumes_on_one_device_and_on_eager(runs, run):
    resumed = runs["one"][run]
    assert resumed["steps"] == list(range(1, 11))  # 5 from the checkpoint's history, 5 trained after resuming
    assert_losses_close(resumed["losses"], runs["pod"]["gpt2"]["losses"], rtol=RTOL)
    assert_losses_close(resumed["eval"], runs["pod"]["gpt2"]["eval"], rtol=RTOL)


def stopped_with_one_message(runs, group: str, run: str) -> str:
    host0, host1 = runs["launched"][group]
    assert host1["returncode"] == -9  # killed: by its own SIGKILL, or by the test once host 0 stopped
    assert host0["returncode"] == EXIT_HOST_LOST
    halted_at = float((runs["out"] / run / "halted_at").read_text())
    assert host0["ended"] - halted_at < 10 + 30  # host_timeout_s=10, and the start of the next step
    text = log_text(runs["out"], group, 0)
    assert text.count(STOP_MESSAGE) == 1, text[-3000:]
    assert "resume_from_checkpoint=True" in text and "Terminating process" not in text
    return text


def test_a_killed_host_stops_the_other_at_once_with_one_message(runs):
    stopped_with_one_message(runs, "pod", "gpt2_killed")


def test_a_hung_host_stops_the_other_after_the_host_timeout(runs):
    text = stopped_with_one_message(runs, "again", "gpt2_hung")  # SIGSTOP: gloo waits, the watchdog speaks
    assert f"{STOP_MESSAGE}: host 1 has not been heard from" in text


def test_the_same_command_with_resume_continues_the_killed_run(runs):
    resumed = runs["again"]["gpt2_killed_resumed"]
    assert resumed["steps"] == list(range(1, 11))
    assert_losses_close(resumed["losses"], runs["pod"]["gpt2"]["losses"], rtol=RTOL)


def test_bf16_runs_the_matmuls_in_bf16_within_the_tolerance_of_stock_autocast(runs):
    one = runs["one"]
    counts = one["bf16_matmuls"]
    assert counts["fp32"]["bf16_dots"] == 0 and counts["bf16"]["bf16_dots"] >= counts["bf16"]["dots"] - 1
    assert_losses_close(one["xla_bf16"]["losses"], one["stock_bf16"]["losses"], rtol=BF16_RTOL)
    assert_losses_close(one["xla_bf16"]["eval"], one["stock_bf16"]["eval"], rtol=BF16_RTOL)
    gap = max(abs(a - b) for a, b in zip(one["xla_bf16"]["losses"], one["xla4_gpt2"]["losses"]))
    assert gap > 1e-6  # bf16 rounding shows: the run did not quietly train in fp32
