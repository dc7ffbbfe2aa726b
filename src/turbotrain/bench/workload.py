"""What a benchmark workload is, and the registry `turbotrain bench --task NAME` picks one from.

A workload is one file under `bench/workloads/`: a dataclass registered under its task names with
`@register_workload(...)`. Its fields are its `turbotrain bench` flags (flags.py: names, types, defaults
and the `help` of each field's metadata); the runner (runner.py) asks it, through the `Workload`
protocol, for:

* `model()`: the initial model; every peer trains a fresh copy of it, so all start from the same weights;
* `data()`: what the peers train on (`.train` and `.collator`, and whatever else its peers need);
* `peers` (a field) and `reference` (the peer the others are compared with: `stock`, or `eager`);
* `trainer(peer, model, data, counter, output_dir)`: the trainer of one peer, anything whose `train()`
  returns a `PeerRecord` (peers.py wraps a Transformers Trainer built as a user writes it; the unet
  workload runs its own loop). It passes the peer's batches through `counter` (counting.py);
* `unit`: what its throughput counts per step ("tokens": real tokens; "label tokens"; "examples"), and
  `step_work(batch)`: the FLOP count's work (measure/flops.py) of a batch where `counts_work` (not for
  encoder-decoder models or the UNet, which the formula does not describe: no GFLOP/s, no MFU);
* `apart`: the name of a part of the step its peers time apart (`PeerRecord.apart_seconds`, not in the step
  seconds: GRPO's generation), or "" where none is;
* `title()`: the heading of its report row; `extras(model, data)`: what its report adds (a length
  histogram, the head's share of the step).

`Schedule` holds what every workload shares (rounds, steps, warm-up, peers, seed) and answers the rest
with defaults; `command()` is the `turbotrain bench` line that reproduces the workload.
"""

from __future__ import annotations

import typing
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from typing import Any, ClassVar, Protocol

import torch

from turbotrain.passes.registry import pass_names

TURBO_PASSES = tuple(pass_names())  # every registered pass (passes/registry.py)
WORKLOADS: dict[str, type] = {}  # task name -> workload class (bench/workloads/ fills it)
UNIT_KEYS = {"tokens": "tokens_per_s", "label tokens": "label_tokens_per_s", "examples": "examples_per_s"}
FLAG_NAMES = {"num_layers": "layers", "num_heads": "heads"}  # fields whose flag is not their name


def register_workload(*tasks: str):
    """Class decorator: `turbotrain bench --task <each of tasks>` builds this workload."""

    def register(cls: type) -> type:
        for task in tasks:
            WORKLOADS[task] = cls
        return cls

    return register


def flag_of(name: str) -> str:
    """The command-line flag of a workload field: `num_layers` -> `--layers`, `seq_len` -> `--seq-len`."""
    return "--" + FLAG_NAMES.get(name, name).replace("_", "-")


ANY_INT = ("seed",)  # int fields that take any value; every other count is >= 1 unless its metadata says "min"
FRACTIONS = ("dropout",)  # float fields in [0, 1)


def _bad_count(name: str, value: Any, low: int) -> str | None:
    values = value if isinstance(value, tuple) else (value,)
    if all(isinstance(v, int) and not isinstance(v, bool) and v >= low for v in values):
        return None
    what = "a positive whole number" if low == 1 else f"a whole number >= {low}"
    return f"{flag_of(name)} must be {what}{' each' if isinstance(value, tuple) else ''}, got {_shown(value)}"


def _shown(value: Any) -> str:
    return " ".join(map(str, value)) if isinstance(value, tuple) else str(value)


def check_bounds(workload: Any) -> None:
    """Raise ValueError naming the flag for the first count below its least value (1, or the field's "min"
    metadata: `warmup` takes 0), fraction outside [0, 1), or hidden size that the heads do not divide; None
    (the task's default) is left alone."""
    hints = typing.get_type_hints(type(workload))
    for f in fields(workload):
        value = getattr(workload, f.name)
        if value is None or f.name in ANY_INT:
            continue
        if f.name in FRACTIONS:
            if not (isinstance(value, (int, float)) and 0 <= value < 1):
                raise ValueError(f"{flag_of(f.name)} must be in [0, 1), got {value}")
        elif _counts_in(hints[f.name]):
            problem = _bad_count(f.name, value, f.metadata.get("min", 1))
            if problem:
                raise ValueError(problem)
    hidden, heads = getattr(workload, "hidden_size", None), getattr(workload, "num_heads", None)
    if hidden is not None and heads is not None and hidden % heads:
        raise ValueError(f"--hidden-size ({hidden}) must be a multiple of --heads ({heads})")


def _counts_in(annotation: Any) -> bool:
    """Whether a field annotated so holds whole numbers: int, int | None, tuple[int, ...]."""
    return annotation is int or int in typing.get_args(annotation)


@dataclass
class BenchData:
    """What a workload's peers train on: a dataset and the collator that batches it."""

    train: Any
    collator: Any


@dataclass
class PeerRecord:
    """What one peer's segment gives the runner (peers.TrainerPeer for a Trainer; a workload's own loop)."""

    seconds: list[float]  # every step, warm-up included
    losses: list[float]
    backend: str = ""
    backend_report: dict = field(default_factory=dict)
    passes: list[str] = field(default_factory=list)
    model: torch.nn.Module | None = None  # for the memory split (measure/memory.py)
    optimizer: torch.optim.Optimizer | None = None
    logits_bytes: int | None = None  # None: not counted
    resident_at_start_mb: float | None = None  # memory held when training began, before the first step
    apart_seconds: list[float] | None = None  # every step's seconds in a part timed apart, not in `seconds`
    batch_keys: list[str] | None = None  # every step's batch as a digest, where the peer makes its own batches


class Workload(Protocol):
    task: str
    peers: tuple[str, ...]
    rounds: int
    steps: int
    warmup: int
    isolate: bool
    reference: ClassVar[str]
    unit: ClassVar[str]
    apart: ClassVar[str]

    def model(self) -> torch.nn.Module: ...
    def data(self) -> Any: ...
    def trainer(self, peer: str, model, data, counter, output_dir: str) -> Any: ...  # .train() -> PeerRecord
    @property
    def counts_work(self) -> bool: ...
    def step_work(self, batch: dict) -> dict | None: ...
    def title(self) -> str: ...
    def extras(self, model, data) -> dict: ...
    def describe(self) -> dict: ...
    def command(self) -> str: ...


@dataclass
class Schedule:
    """What every workload has: interleaved rounds of `warmup + steps` steps per peer."""

    task: str = ""
    rounds: int = field(default=3, metadata={"help": "rounds of every peer, interleaved"})
    steps: int = field(default=5, metadata={"help": "measured steps per round and peer"})
    warmup: int = field(default=1, metadata={"help": "unmeasured steps at the start of each round", "min": 0})
    isolate: bool = field(
        default=False, metadata={"help": "run each peer's segment in a process of its own (bench/isolated.py)"}
    )
    peers: tuple[str, ...] = ()
    seed: int = 0

    reference: ClassVar[str] = "stock"
    unit: ClassVar[str] = "tokens"
    apart: ClassVar[str] = ""

    def __post_init__(self):
        self.peers = tuple(self.peers)
        check_bounds(self)
        if not self.peers:
            raise ValueError("no peers to run")

    @property
    def device(self) -> torch.device:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    @property
    def counts_work(self) -> bool:
        """Whether `step_work` counts the FLOPs' work of a batch (so GFLOP/s and MFU are reported)."""
        return False

    def step_work(self, batch: dict) -> dict | None:
        return None

    def extras(self, model, data) -> dict:
        return {}

    def describe(self) -> dict:
        return asdict(self)

    def command(self) -> str:
        """The `turbotrain bench` command line that reproduces this workload (fields at their default left out)."""
        words = ["turbotrain bench", f"--task {self.task}"]
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "task" or value in (None, ()) or value == _default(f):
                continue
            if isinstance(value, bool):
                words.append(flag_of(f.name))
            else:
                shown = " ".join(map(str, value)) if isinstance(value, tuple) else value
                words.append(f"{flag_of(f.name)} {shown}")
        return " ".join(words)


def _default(f: Field):
    return f.default_factory() if f.default_factory is not MISSING else f.default
