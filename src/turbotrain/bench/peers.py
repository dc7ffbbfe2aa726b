"""The peers of every Trainer workload, built as a user writes them, and how one of them trains.

Peers (`TrainerWorkload`: the workload names its Trainer class and arguments class):
* `stock`: the Trainer class as it is; `compiled`: the same with `torch_compile=True`;
* `turbo`: `turbo(TrainerClass)` with `turbo_arguments(ArgumentsClass)` on `--backend`; `turbo:<backend>`
  on that backend; `turbo:<backend>:key=value,...` with backend options (`turbo:inductor:scope=blocks`);
  `--turbo-off PASS ...` turns passes off for every turbo peer (ablations).
Every peer trains a fresh copy of the initial model on the same batches, `warmup + steps` optimizer steps
with a log line (its loss) each and nothing saved (`segment_arguments`), under bf16 autocast with `--bf16`.

`TrainerPeer(trainer, counter).train()` trains one and returns its `PeerRecord`: step times (StepClock,
measure/timing.py), losses, the backend it ran on (and what `auto` chose), the passes that applied, and
what its memory split needs (the model, the optimizer, the fp32 logits of its largest step: [rows the
head ran on, V], one chunk where the chunked head took the call), and the memory held when training began
(`ResidentAtStart`: after the trainer and its passes' self-checks, before the first step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from transformers import Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback, TrainerCallback

from turbotrain import modeling
from turbotrain.args import attribute_names, turbo_arguments
from turbotrain.backends import valid_choices
from turbotrain.bench.counting import BatchCounter
from turbotrain.bench.initial_model import fresh_copy
from turbotrain.bench.workload import TURBO_PASSES, PeerRecord, Schedule
from turbotrain.measure.flops import batch_work
from turbotrain.measure.memory import PeakMemory
from turbotrain.measure.timing import StepClock
from turbotrain.passes.chunked_ce import chunk_rows_for
from turbotrain.passes.registry import off_value
from turbotrain.trainer import turbo

TRAINER_PEERS = ("stock", "compiled", "turbo")


def segment_arguments(output_dir: str, batch_size: int, steps: int, seed: int) -> dict:
    """Training arguments every benchmark segment shares: `steps` optimizer steps, a log line each, no saving."""
    return dict(
        output_dir=output_dir,
        per_device_train_batch_size=batch_size,
        max_steps=steps,
        learning_rate=1e-4,
        warmup_steps=0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=seed,
        dataloader_num_workers=0,
    )


def peer_backend(peer: str, default: str) -> tuple[str, dict | None]:
    """ "turbo" -> (default, None); "turbo:inductor" -> ("inductor", None);
    "turbo:inductor:scope=blocks" -> ("inductor", {"scope": "blocks"}) (options: key=value, comma-separated)."""
    parts = peer.split(":", 2)
    backend = parts[1] if len(parts) > 1 else default
    if len(parts) < 3:
        return backend, None
    options = dict(item.split("=", 1) for item in parts[2].split(","))
    return backend, {k: int(v) if v.isdigit() else v for k, v in options.items()}


@dataclass
class TrainerWorkload(Schedule):
    """A workload whose peers are Trainers (`trainer_class`, `arguments_class`); the fields every one takes."""

    batch_size: int = field(default=16, metadata={"help": "examples per step"})
    bf16: bool = field(default=False, metadata={"help": "bf16 autocast for every peer"})
    backend: str = field(default="auto", metadata={"help": "the turbo peer's backend", "choices": valid_choices()})
    turbo_off: tuple[str, ...] = field(
        default=(), metadata={"help": "passes turned off for the turbo peers (ablation)", "choices": TURBO_PASSES}
    )

    trainer_class: ClassVar[type] = Trainer
    arguments_class: ClassVar[type] = TrainingArguments
    own_peers: ClassVar[tuple[str, ...]] = ()  # peers a workload adds to TRAINER_PEERS (sft: TRL's)
    causal: ClassVar[bool | None] = None  # the FLOP count's label shift; None: the formula does not apply

    def __post_init__(self):
        super().__post_init__()
        self.turbo_off = tuple(self.turbo_off)
        unknown_passes = set(self.turbo_off) - set(TURBO_PASSES)
        if unknown_passes:
            raise ValueError(f"unknown passes {sorted(unknown_passes)}; choose from {', '.join(TURBO_PASSES)}")
        known = (*TRAINER_PEERS, *self.own_peers)
        unknown = [p for p in self.peers if p not in known and p.split(":", 1)[0] != "turbo"]
        if unknown:
            raise ValueError(
                f"unknown peers {sorted(unknown)}; choose from {', '.join(known)} "
                "(turbo:<backend> runs the turbo peer on that backend)"
            )

    @property
    def counts_work(self) -> bool:
        return self.causal is not None

    def step_work(self, batch: dict) -> dict | None:
        if self.causal is None:
            return None
        flags = ((packed, sparse) for packed in (False, True) for sparse in (False, True))
        return {(p, s): batch_work(batch, packed=p, sparse_head=s, causal=self.causal) for p, s in flags}

    def run_suffix(self) -> str:
        """The end of a report heading: the dtype, and the passes an ablation turned off."""
        off = f" (turbo without {', '.join(self.turbo_off)})" if self.turbo_off else ""
        return f"{' bf16' if self.bf16 else ' fp32'}{off}"

    def common_arguments(self, output_dir: str) -> dict:
        steps = self.warmup + self.steps
        on_cpu = not torch.cuda.is_available()
        arguments = segment_arguments(output_dir, self.batch_size, steps, self.seed)
        return {**arguments, "bf16": self.bf16, "use_cpu": on_cpu and self.bf16}

    @staticmethod
    def fresh(model):
        """The peer's own copy of the initial model (every peer starts from the same weights); `model` is the
        model itself or the runner's `SpilledModel` of it."""
        return fresh_copy(model)

    def trainer(self, peer: str, model, data, counter: BatchCounter, output_dir: str) -> TrainerPeer:
        return TrainerPeer(self.build_trainer(peer, model, data, counter, output_dir), counter)

    def build_trainer(
        self, peer: str, model, data, counter: BatchCounter, output_dir: str, turbo_extra: dict | None = None
    ) -> Trainer:
        """A fresh trainer for `peer` on a fresh copy of `model`, its batches counted by `counter`;
        `turbo_extra`: more turbotrain options (by option name) for a turbo peer."""
        common = self.common_arguments(output_dir)
        kw = dict(model=self.fresh(model), train_dataset=data.train, data_collator=counter.wrap(data.collator))
        if peer in ("stock", "compiled"):
            args = self.arguments_class(**common, **({"torch_compile": True} if peer == "compiled" else {}))
            return self.trainer_class(args=args, **kw)
        arguments_class = turbo_arguments(self.arguments_class)
        names = attribute_names(arguments_class)
        turbo_options = self.turbo_options(arguments_class, peer)
        turbo_options.update({names[name]: value for name, value in (turbo_extra or {}).items()})
        return turbo(self.trainer_class)(args=arguments_class(**turbo_options, **common), **kw)

    def peer_classes(self, peer: str, arguments_class: type, trainer_class: type) -> tuple[type, type, dict]:
        """(arguments class, trainer class, turbotrain options) a peer is built from: a turbo peer (`turbo`,
        `turbo:<backend>`) gets `turbo_arguments(...)`, `turbo(...)` and its options; any other the classes as given."""
        if peer.split(":", 1)[0] != "turbo":
            return arguments_class, trainer_class, {}
        arguments_class = turbo_arguments(arguments_class)
        return arguments_class, turbo(trainer_class), self.turbo_options(arguments_class, peer)

    def turbo_options(self, arguments_class: type, peer: str) -> dict:
        """The turbotrain options of a turbo peer (its backend and options, the passes `--turbo-off` turns off),
        by `arguments_class`'s attribute names (a turbo arguments class)."""
        names = attribute_names(arguments_class)
        backend, backend_options = peer_backend(peer, self.backend)
        options = {names["backend"]: backend, names["backend_options"]: backend_options}
        options.update({names[name]: off_value(name) for name in self.turbo_off})
        return options


class ResidentAtStart(TrainerCallback):
    """The memory the process holds when training begins (after the trainer and its passes are built, before the
    first step): the resident set on a CPU, allocated memory on CUDA (measure/memory.py)."""

    def __init__(self, memory: PeakMemory):
        self.memory, self.mb = memory, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.mb = self.memory.current_mb()


class TrainerPeer:
    """One peer's trainer; `train()` trains it with its steps timed and nothing printed."""

    def __init__(self, trainer: Trainer, counter: BatchCounter):
        self.trainer, self.counter = trainer, counter

    def train(self) -> PeerRecord:
        trainer = self.trainer
        clock, at_start = StepClock(), ResidentAtStart(PeakMemory(trainer.args.device))
        trainer.add_callback(clock)
        trainer.add_callback(at_start)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
        backend = getattr(trainer, "backend", None)
        report = backend.report() if backend is not None else {}
        name = getattr(backend, "name", "")
        if "choice" in report:  # a backend that chooses (auto) names what it ran
            name += f": {report['choice']}"
        optimized = getattr(trainer, "turbo_report", None)
        passes = optimized.applied if optimized is not None else []
        return PeerRecord(
            seconds=clock.step_seconds(),
            losses=[entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
            backend=name or ("inductor" if trainer.args.torch_compile else "eager"),
            backend_report=report,
            passes=passes,
            model=trainer.model,
            optimizer=trainer.optimizer,
            logits_bytes=self.logits_bytes(passes, optimized),
            resident_at_start_mb=at_start.mb,
        )

    def logits_bytes(self, passes: list[str], optimized) -> int | None:
        """The fp32 logits of the step whose head ran on the most rows (None where no work was counted)."""
        works = [count.work for count in self.counter.counts if count.work]
        linear = modeling.output_linear(modeling.output_projection(self.trainer.model))
        if not works or linear is None:
            return None if not works else 0
        rows = max(work["padding_free" in passes, "label_sparsity" in passes].head_rows for work in works)
        chunked = optimized.chunked_cross_entropy if optimized is not None else None
        if chunked is not None and chunked.wants(rows):
            rows = min(rows, chunk_rows_for(linear.out_features))
        return rows * linear.out_features * 4
