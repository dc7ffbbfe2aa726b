"""Unmodified scripts through `turbotrain run`, `python -m turbotrain`, `torchrun -m turbotrain` and
`accelerate launch -m turbotrain`, in subprocesses: the same losses as the stock script, turbotrain's
passes active. TRL's `sft.py` is the installed TRL's; Transformers' example scripts are not installed
with Transformers, so they run where TURBOTRAIN_HF_EXAMPLES names a checkout's `examples/pytorch`
(as `scripts/hf_examples.py --examples-dir` takes it). Data and models: `scripts/hf_examples.py`'s
(local corpus, tiny configs, dropout 0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from scripts.hf_examples import (
    ABORT_RETRY,
    aborted_at_exit,
    build_assets,
    compare,
    examples,
    installed_trl_scripts,
    prepare,
    run_one,
    script_env,
    write_shims,
)

from tests.launch.tiny_scripts import DATA_PARALLEL

HF_EXAMPLES = os.environ.get("TURBOTRAIN_HF_EXAMPLES")
PASSES_ACTIVE = ("label_sparsity", "padding_free")
# a sequence classifier has one label per row and no LM head: label sparsity is for LM heads only
# (passes/label_sparsity/)
PASSES_ACTIVE_BY_SCRIPT = {"run_glue": ("padding_free", "embedding_grad")}
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
SHORT = ["--max_steps", "4", "--save_steps", "4"]  # the multi-process runs: 4 steps, a checkpoint at the last


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    w = tmp_path_factory.mktemp("hf-examples")
    build_assets(w, dropout=0.0, media=False)  # no test here runs the image or audio examples
    return w, script_env(w, write_shims(w))


def example(w: Path, name: str):
    return next(e for e in examples(w) if e.name == name)


def assert_same_losses_with_passes(stock, turbo, name: str, passes=PASSES_ACTIVE) -> None:
    loss_diff, eval_diff, status = compare(stock, turbo, 1e-5, name)
    assert status == "ok", f"{status}: loss diff {loss_diff}, eval diff {eval_diff}\n{turbo.tail}\n{stock.tail}"
    assert len(turbo.losses) >= 4
    assert all(p in turbo.summary.split("passes:", 1)[-1] for p in passes), turbo.summary


@pytest.mark.requires_llm
def test_trl_sft_script_through_turbotrain_run_matches_stock(work):
    w, env = work
    sft = example(w, "sft")
    runs = {v: run_one(sft, prepare(sft, installed_trl_scripts(), w, v), w, v, env) for v in ("stock", "run")}
    assert_same_losses_with_passes(runs["stock"], runs["run"], "run")
    assert "made 1 Trainer: TurboSFTTrainer" in runs["run"].tail


@pytest.mark.parametrize("name", ["run_clm", "run_mlm", "run_glue"])
def test_transformers_example_through_turbotrain_run_matches_stock(work, name):
    w, env = work
    ex = example(w, name)
    if not HF_EXAMPLES or not (Path(HF_EXAMPLES) / ex.script).is_file():
        pytest.skip(f"{ex.script} not found: set TURBOTRAIN_HF_EXAMPLES to a transformers checkout's examples/pytorch")
    runs = {v: run_one(ex, prepare(ex, Path(HF_EXAMPLES), w, v), w, v, env) for v in ("stock", "run")}
    assert_same_losses_with_passes(runs["stock"], runs["run"], "run", PASSES_ACTIVE_BY_SCRIPT.get(name, PASSES_ACTIVE))
    assert runs["run"].metrics, "the evaluation ran and compared"


@pytest.mark.requires_llm
def test_trl_sft_script_under_torchrun_m_turbotrain_matches_stock_torchrun(work):
    w, env = work
    sft = example(w, "sft")
    script = prepare(sft, installed_trl_scripts(), w, "stock")
    # stock on CPU processes needs use_cpu for real data parallelism; turbotrain sets it itself
    # fp32: TRL's default bf16 is emulated by turbotrain on a CPU without bf16 units (one bf16 ulp per op)
    fp32 = [*SHORT, "--bf16", "False"]
    stock = run_one(sft, script, w, "torchrun-stock", env, launch=TORCHRUN, extra=[*fp32, "--use_cpu", "True"])
    turbo = run_one(sft, script, w, "torchrun-turbo", env, launch=[*TORCHRUN, "-m", "turbotrain"], extra=fp32)
    assert_same_losses_with_passes(stock, turbo, "torchrun -m turbotrain")


def test_accelerate_launch_m_turbotrain_runs_every_process_with_turbotrain(tmp_path):
    accelerate = Path(sys.executable).parent / "accelerate"
    if not accelerate.exists():
        pytest.skip("no accelerate command next to this Python")
    script = tmp_path / "dp.py"
    script.write_text(textwrap.dedent(DATA_PARALLEL))
    env = {**os.environ, "TURBOTRAIN_OPTIONS": '{"backend": "eager"}', "OMP_NUM_THREADS": "1"}
    command = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    command += ["--mixed_precision", "no", "--dynamo_backend", "no", "-m", "turbotrain", str(script), str(tmp_path)]
    rank_files = [tmp_path / f"rank{r}.json" for r in (0, 1)]
    aborts = []  # torch's gloo teardown can abort a finished rank at exit (stock too): up to 3 launches, all shown
    for _ in range(3):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        if not aborted_at_exit(done.returncode, done.stderr, finished=all(f.exists() for f in rank_files)):
            break
        aborts.append(done.stderr[-1500:])
        for f in rank_files:
            f.unlink()
    assert done.returncode == 0, "\n--- launched again ---\n".join([*aborts, done.stderr[-3000:]])
    ranks = [json.loads(f.read_text()) for f in rank_files]
    for seen in ranks:
        assert seen["world"] == 2 and seen["trainer"] == "TurboTrainer" and seen["backend"] == "eager"
        assert "label_sparsity" in seen["passes"]
    assert done.stderr.count("dp.py made 1 Trainer: TurboTrainer") == 1, "the last line is said once, by rank 0"


def test_the_console_command_and_python_m_behave_the_same(tmp_path):
    turbotrain = Path(sys.executable).parent / "turbotrain"
    if not turbotrain.exists():
        pytest.skip("no turbotrain command next to this Python (pip install -e .)")
    script = tmp_path / "quits.py"
    script.write_text("import sys\nprint(sys.argv[1:])\nsys.exit(4)\n")
    ways = {
        "console": [str(turbotrain), "run", "--backend", "eager", str(script), "a"],
        "-m": [sys.executable, "-m", "turbotrain", "--backend", "eager", str(script), "a"],
    }
    results = {way: subprocess.run(cmd, capture_output=True, text=True) for way, cmd in ways.items()}
    for way, done in results.items():
        assert (done.returncode, done.stdout) == (4, "['a']\n"), (way, done.stderr)
        assert done.stderr.strip().endswith("quits.py made no Trainer: nothing was accelerated"), (way, done.stderr)


def test_only_an_abort_after_finished_training_is_launched_again():
    abort = "{'train_runtime': 1.2}\nterminate called without an active exception\nSignal 6 (SIGABRT) received by PID 7"
    assert aborted_at_exit(1, abort)
    assert not aborted_at_exit(0, abort)  # a clean exit
    assert not aborted_at_exit(1, abort.replace("{'train_runtime': 1.2}", ""))  # died before training finished
    assert not aborted_at_exit(1, "{'train_runtime': 1.2}\nRuntimeError: boom")  # any other failure stands
    assert not aborted_at_exit(1, f"{abort}\n--- {ABORT_RETRY} ---\n{abort}")  # a second abort stands
    assert aborted_at_exit(1, "Signal 6 (SIGABRT)", finished=True)
    assert not aborted_at_exit(1, "Signal 6 (SIGABRT)", finished=False)
