"""`turbotrain bench` flags, derived from the registered workloads' dataclass fields (nothing re-listed).

`--task` chooses the workload (bench/workloads/); every field of every workload is a flag: `--<name>`
(`workload.FLAG_NAMES` for the few that differ: `num_layers` is `--layers`), typed from the field's
annotation (bool: a switch; tuple[X, ...]: one or more X; X | None: an X), with the `help` and `choices`
of its metadata (a flag several tasks take offers all their choices; each workload checks its own).
Defaults are the chosen task's own (a flag not given is left to its dataclass); a flag
the chosen task does not take is an error naming the tasks that do.

`turbotrain bench --help` reads the same flags from `flag_table.py` instead (`flag_rows()` of every workload,
written out as data), so help imports no workload, hence no torch: under a second instead of ~5 s. A test checks
the table against the workloads; after changing a workload's fields, write it again with
`python -m turbotrain.bench.flags` (the run itself always reads the workloads).
"""

from __future__ import annotations

import argparse
import pprint
import typing
from dataclasses import MISSING, fields
from pathlib import Path
from types import UnionType

from turbotrain.utils.help_text import without_source_paths

SELECTOR = "task"
TYPES = {"int": int, "float": float, "str": str}  # the flags' types, by name in the table


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
    from turbotrain.bench.workload import WORKLOADS
    from turbotrain.bench.workloads import task_names

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


def _help(spec: dict, task_count: int) -> str:
    """Each help text with the tasks it is of (where they differ), the default, and the tasks taking the flag."""
    texts = spec["help"]
    helps = "; ".join(text if len(texts) == 1 else f"{text} [{' '.join(tasks)}]" for text, tasks in texts.items())
    defaults = {repr(v) for v in spec["defaults"].values()}
    shown = f"default {next(iter(defaults))}" if len(defaults) == 1 else "default: the task's"
    tasks = "" if len(spec["tasks"]) == task_count else f"; tasks: {' '.join(spec['tasks'])}"
    return without_source_paths(f"{helps} ({shown}{tasks})".replace("%", "%%").lstrip())


def flag_rows() -> tuple[list[str], list[dict]]:
    """(the task names, one row of plain data per flag: what `add_workload_flags` gives argparse), from the
    registered workloads: what flag_table.py holds."""
    from turbotrain.bench.workload import flag_of
    from turbotrain.bench.workloads import task_names

    tasks, rows = task_names(), []
    for name, spec in _flag_specs().items():
        row = {"flag": flag_of(name), "dest": name, "help": _help(spec, len(tasks))}
        row.update({k: v for k, v in spec.items() if k in ("action", "nargs", "choices")})
        if "type" in spec:
            row["type"] = spec["type"].__name__
        rows.append(row)
    return tasks, rows


def add_workload_flags(parser: argparse.ArgumentParser, table: tuple[list[str], list[dict]] | None = None) -> None:
    """The flags of every registered workload (`table`: flag_table.py's, for help without importing them)."""
    tasks, rows = flag_rows() if table is None else table
    parser.add_argument(f"--{SELECTOR}", default="mlm", choices=tasks, help="the workload")
    for row in rows:
        keywords = {k: v for k, v in row.items() if k not in ("flag", "type")}
        if "type" in row:
            keywords["type"] = TYPES[row["type"]]
        parser.add_argument(row["flag"], default=argparse.SUPPRESS, **keywords)


def static_table() -> tuple[list[str], list[dict]]:
    from turbotrain.bench.flag_table import FLAGS, TASKS

    return list(TASKS), FLAGS


def write_table(path: Path | None = None) -> None:
    path = path or Path(__file__).with_name("flag_table.py")
    tasks, rows = flag_rows()
    head = f'''"""Generated by `python -m turbotrain.bench.flags` from the workloads' fields: `turbotrain bench --help` reads
it, importing no workload (flags.py). tests/test_cli_help.py checks it against the workloads."""

TASKS = {tuple(tasks)!r}
FLAGS = '''
    path.write_text(head + pprint.pformat(rows, width=116, sort_dicts=False) + "\n")


def workload_from_flags(values: dict):
    """The workload of `--task` with the flags given (others at the task's defaults)."""
    from turbotrain.bench.workload import flag_of
    from turbotrain.bench.workloads import make_workload

    values = dict(values)
    task = values.pop(SELECTOR)
    specs = _flag_specs()
    foreign = sorted(name for name in values if task not in specs[name]["tasks"])
    if foreign:
        named = ", ".join(f"{flag_of(n)} (tasks: {' '.join(specs[n]['tasks'])})" for n in foreign)
        raise ValueError(f"--task {task} takes no {named}")
    return make_workload(task, **{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


if __name__ == "__main__":
    write_table()
