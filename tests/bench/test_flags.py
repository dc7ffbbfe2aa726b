"""`turbotrain bench` flags come from the workloads' dataclasses: a new workload is one class (here a
throwaway one) and gets its flags, its runs and its report with nothing else edited; every workload's
`command()` parses back to the same workload."""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import dataclass, field

import pytest

from turbotrain.bench.flags import add_workload_flags, workload_from_flags
from turbotrain.bench.runner import run_bench
from turbotrain.bench.workload import WORKLOADS, PeerRecord, Schedule, register_workload
from turbotrain.bench.workloads import make_workload, task_names
from turbotrain.cli import main


def parse(argv: list[str]):
    parser = argparse.ArgumentParser()
    add_workload_flags(parser)
    return workload_from_flags(vars(parser.parse_args(argv)))


class CountingLoop:
    def __init__(self, workload, peer, counter):
        self.workload, self.peer, self.counter = workload, peer, counter

    def train(self) -> PeerRecord:
        steps = self.workload.warmup + self.workload.steps
        for _ in range(steps):
            self.counter.note({"x": __import__("torch").zeros(self.workload.widgets, 2)})
        loss = 1.0 if self.peer == "slow" else 1.5
        return PeerRecord(seconds=[0.5 if self.peer == "slow" else 0.25] * steps, losses=[loss] * steps)


@pytest.fixture
def throwaway():
    @register_workload("throwaway")
    @dataclass
    class Throwaway(Schedule):
        peers: tuple[str, ...] = ("slow", "fast")
        widgets: int = field(default=2, metadata={"help": "rows per step"})

        reference = "slow"
        unit = "examples"

        def model(self):
            return __import__("torch").nn.Linear(2, 2)

        def data(self):
            return None

        def trainer(self, peer, model, data, counter, output_dir):
            return CountingLoop(self, peer, counter)

        def title(self) -> str:
            return f"throwaway, {self.widgets} widgets"

    yield Throwaway
    del WORKLOADS["throwaway"]


def test_a_new_workload_is_one_class(throwaway, tmp_path):
    workload = parse(["--task", "throwaway", "--widgets", "4", "--rounds", "2", "--steps", "3"])
    assert isinstance(workload, throwaway) and workload.widgets == 4
    assert workload.command() == "turbotrain bench --task throwaway --rounds 2 --steps 3 --widgets 4"
    result = run_bench(workload, out_dir=tmp_path)
    fast = json.loads((tmp_path / "bench.json").read_text())["peers"]["fast"]
    assert fast["examples_per_s"] == 16.0 and fast["ratio"] == 2.0 and fast["max_abs_loss_diff"] == 0.5
    assert result["title"] == "throwaway, 4 widgets"
    assert "| fast | - | 16.0 | 2.00x" in (tmp_path / "bench.md").read_text()  # "2.00x?" where other work ran


def test_a_flag_of_another_task_is_an_error_naming_the_tasks_that_take_it(capsys):
    assert main(["bench", "--task", "unet", "--seq-len", "64"]) == 2
    assert "--task unet takes no --seq-len (tasks: clm cls mlm sft)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "task, values",
    [
        ("mlm", {"lengths": "variable", "peers": ("stock", "turbo:inductor:scope=blocks"), "dropout": 0.0}),
        ("cls", {"vocab_size": 2000, "bf16": True}),
        ("clm", {"turbo_off": ("label_sparsity", "padding_free"), "num_layers": 2}),
        ("sft", {"shape": "qwen2.5-0.5b", "lora": True, "batch_size": 2, "num_layers": 1}),
        ("seq2seq", {"source_len": 32, "backend": "onnxruntime"}),
        ("asr", {"freeze_encoder": True, "window_s": 3}),
        ("unet", {"channels": (8, 16), "peers": ("eager",)}),
        ("grpo", {"vocab_size": 151936, "max_completion_length": 64, "prompt_tokens": (10, 40)}),
    ],
)
def test_every_workload_command_parses_back_to_it(task, values):
    workload = make_workload(task, **values)
    words = shlex.split(workload.command())
    assert words[:2] == ["turbotrain", "bench"]
    assert parse(words[2:]) == workload


def test_every_registered_task_is_a_choice_of_the_cli():
    assert set(task_names()) >= {"mlm", "cls", "clm", "sft", "seq2seq", "asr", "unet"}


def test_a_flag_two_tasks_share_takes_each_task_s_own_choices():
    # --lengths: fixed/variable for the corpus workloads, chat/code/long for sft; argparse offers all five and
    # each workload refuses the others'
    assert parse(["--task", "cls", "--lengths", "variable"]).lengths == "variable"
    assert parse(["--task", "sft", "--lengths", "long"]).lengths == "long"
    assert parse(["--task", "sft", "--lengths", "code"]).lengths == "code"
    with pytest.raises(ValueError, match="sft takes lengths chat or code or long"):
        parse(["--task", "sft", "--lengths", "fixed"])
    with pytest.raises(ValueError, match="lengths must be one of"):
        parse(["--task", "mlm", "--lengths", "long"])
