"""torchrun with 2 CPU processes (gloo): TurboTrainer under DDP, and under DeepSpeed ZeRO stage 1, 2 and 3
(DeepSpeed's CPU accelerator), with every pass on, trains like one process with the same global batch:
the held-out loss after every step agrees within 1e-4 relative. DDP and the three ZeRO stages train one after
another in one launch (tests/scale/ddp_worker.py), each from the same initial weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import requires
from tests.trainer_helpers import assert_losses_close

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
STAGES = ["zero1", "zero2", "zero3"]


def run(out: Path, per_device: int, *extra: str, processes: int = 1) -> Path:
    """Launch the worker; the folder where rank 0 wrote losses-ENGINE.json for each engine in `extra`."""
    out.mkdir(parents=True, exist_ok=True)
    module = ["-m", "tests.scale.ddp_worker", str(out), str(per_device), *extra]
    launcher = (
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={processes}",
            "--master_port=0",
            "--rdzv_backend=c10d",
            "--rdzv_endpoint=localhost:0",
        ]
        if processes > 1
        else [sys.executable]
    )
    done = subprocess.run([*launcher, *module], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def losses(out: Path, engine: str = "plain") -> dict:
    return json.loads((out / f"losses-{engine}.json").read_text())


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict:
    return losses(run(tmp_path_factory.mktemp("single"), 4))


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> Path:
    """One torchrun launch: DDP, then (where DeepSpeed is installed) ZeRO stage 1, 2 and 3."""
    stages = STAGES if requires.missing("requires_deepspeed") is None else []
    return run(tmp_path_factory.mktemp("two"), 2, "plain", *stages, processes=2)


@pytest.mark.slow
def test_ddp_two_processes_match_one_process(two_processes, single):
    ddp = losses(two_processes)
    assert ddp["world_size"] == 2 and ddp["wrapped"] == "DistributedType.MULTI_CPU"
    assert {"label_sparsity", "embedding_grad"} <= set(ddp["passes"])
    assert_losses_close(ddp["losses"], single["losses"], rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.requires_deepspeed
def test_deepspeed_zero_stages_on_cpu_match_one_process(two_processes, single, stage):
    run_ = losses(two_processes, stage)
    assert run_["world_size"] == 2 and run_["wrapped"] == "DistributedType.DEEPSPEED"
    # ZeRO-3 shards the parameters: the embedding gradient buffer stays off there (trainer.py)
    assert {"label_sparsity", *(["embedding_grad"] if stage != "zero3" else [])} <= set(run_["passes"])
    assert_losses_close(run_["losses"], single["losses"], rtol=1e-4)
