"""The benchmark's workloads, one file each (the `Workload` protocol: bench/workload.py).

Every module of this package is imported here, and registers its workloads with `@register_workload`:
a new workload is a new file, with nothing to add anywhere else (its fields become `turbotrain bench`
flags, flags.py)."""

import importlib
import pkgutil
from dataclasses import fields

from turbotrain.bench.workload import WORKLOADS, Workload

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def task_names() -> list[str]:
    return sorted(WORKLOADS)


def make_workload(task: str, **values) -> Workload:
    """The workload registered for `task`, with `values` for its fields (an unknown field is an error)."""
    if task not in WORKLOADS:
        raise ValueError(f"unknown task '{task}'; choose from {', '.join(task_names())}")
    cls = WORKLOADS[task]
    unknown = sorted(set(values) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"--task {task} takes no {', '.join(unknown)}")
    return cls(task=task, **values)
