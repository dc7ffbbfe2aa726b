"""`turbotrain bench` flags, derived from the registered workloads' dataclass fields (nothing re-listed).

`--task` chooses the workload (bench/workloads/); every field of every workload is a flag: `--<name>`
(`workload.FLAG_NAMES` for the few that differ: `num_layers` is `--layers`), typed from the field's
annotation (bool: a switch; tuple[X, ...]: one or more X; X | None: an X), with the `help` and `choices`
of its metadata (a flag several tasks take offers all their choices; each workload checks its own).
Defaults are the chosen task's own (a flag not given is left to its dataclass); a flag
the chosen task does not take is an error naming the tasks that do.
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import MISSING, fields
from types import UnionType

from turbotrain.bench.workload import WORKLOADS, Workload, flag_of
from turbotrain.bench.workloads import make_workload, task_names

SELECTOR = "task"


def _argument_type(annotation) -> dict:
    """argparse keywords for a field annotated `annotation`."""
    if typing.get_origin(annotation) in (typing.Union, UnionType):  # X | None
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    if annotation is bool:
        return {"action": "store_true"}
    if typing.get_origin(annotation) is tuple:
        return {"nargs": "+", "type": typing.get_args(annotation)[0]}
    return {"type": annotation}


def _flag_specs() -> dict[str, dict]:
    """Field name -> argparse keywords and the tasks that take it, over every registered workload."""
    specs: dict[str, dict] = {}
    for task in task_names():
        cls = WORKLOADS[task]
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            if f.name == SELECTOR:
                continue
            spec = specs.setdefault(f.name, {"tasks": [], "defaults": {}, "help": {}, **_argument_type(hints[f.name])})
            spec["tasks"].append(task)
            spec["defaults"][task] = f.default_factory() if f.default_factory is not MISSING else f.default
            if f.metadata.get("help"):
                spec["help"].setdefault(f.metadata["help"], []).append(task)
            if "choices" in f.metadata:  # a flag two tasks share takes either's (each task checks its own)
                known = spec.setdefault("choices", [])
                known.extend(c for c in f.metadata["choices"] if c not in known)
    return specs


def _help(spec: dict) -> str:
    """Each help text with the tasks it is of (where they differ), the default, and the tasks taking the flag."""
    texts = spec["help"]
    helps = "; ".join(text if len(texts) == 1 else f"{text} [{' '.join(tasks)}]" for text, tasks in texts.items())
    defaults = {repr(v) for v in spec["defaults"].values()}
    shown = f"default {next(iter(defaults))}" if len(defaults) == 1 else "default: the task's"
    tasks = "" if len(spec["tasks"]) == len(WORKLOADS) else f"; tasks: {' '.join(spec['tasks'])}"
    return f"{helps} ({shown}{tasks})".replace("%", "%%").lstrip()


def add_workload_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(f"--{SELECTOR}", default="mlm", choices=task_names(), help="the workload (bench/workloads/)")
    for name, spec in _flag_specs().items():
        keywords = {k: v for k, v in spec.items() if k not in ("tasks", "defaults", "help")}
        parser.add_argument(flag_of(name), dest=name, default=argparse.SUPPRESS, help=_help(spec), **keywords)


def workload_from_flags(values: dict) -> Workload:
    """The workload of `--task` with the flags given (others at the task's defaults)."""
    values = dict(values)
    task = values.pop(SELECTOR)
    specs = _flag_specs()
    foreign = sorted(name for name in values if task not in specs[name]["tasks"])
    if foreign:
        named = ", ".join(f"{flag_of(n)} (tasks: {' '.join(specs[n]['tasks'])})" for n in foreign)
        raise ValueError(f"--task {task} takes no {named}")
    return make_workload(task, **{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
