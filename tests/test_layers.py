"""The package's layers, read from its source: every module parsed with `ast`, imports inside functions
counted too (a lazy import is still a dependency).

* Nothing below the trainer imports what stands above it: the benchmark (`bench/`), the main job
  (`pretrain/`), the command line (`cli`), the demo data (`data/`: the built-in corpus, chat rows,
  speech), the pretraining shape (`models`), the TRL facade (`sft`) or the package's lazy front
  (`turbotrain/__init__`, `__main__`). Below it: `passes/`, `backends/`, `modeling`, `hf_boundary`,
  `measure/`, `utils/`, `export/`, `ondevice/`, `integrations/`, `trainer`, `args` and the rest.
* No import circle: no two modules reach each other through imports.

An import resolves to the most specific module that exists (`from turbotrain.passes import packing`
is `turbotrain.passes.packing`; `from turbotrain.backends import get_backend` is the package
`turbotrain.backends`), as the import system finds it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import turbotrain

PACKAGE_DIR = Path(turbotrain.__file__).parent
ABOVE_THE_TRAINER = (
    "turbotrain.bench",
    "turbotrain.pretrain",
    "turbotrain.cli",
    "turbotrain.data",
    "turbotrain.models",
    "turbotrain.sft",
    "turbotrain.__main__",
)


def module_sources(root: Path = PACKAGE_DIR, package: str = "turbotrain") -> dict[str, tuple[str, bool]]:
    """module name -> (source, is a package's __init__) for every .py file under `root`."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join([package, *(parts[:-1] if is_package else parts)])
        modules[name] = (path.read_text(encoding="utf-8"), is_package)
    return modules


def imported_modules(name: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The package's modules that module `name` imports anywhere in its source."""
    found = set()
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(_most_specific(alias.name, known) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                found.add(_most_specific(f"{base}.{alias.name}", known))
    return {module for module in found if module in known and module != name}


def _most_specific(dotted: str, known: set[str]) -> str:
    while dotted and dotted not in known:
        dotted = dotted.rpartition(".")[0]
    return dotted


def import_graph(modules: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    known = set(modules)
    return {name: imported_modules(name, source, is_package, known) for name, (source, is_package) in modules.items()}


def is_above(module: str) -> bool:
    return module == "turbotrain" or any(module == top or module.startswith(top + ".") for top in ABOVE_THE_TRAINER)


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if not is_above(module)
        for target in targets
        if is_above(target)
    )


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_nothing_below_the_trainer_imports_the_layers_above_it():
    graph = import_graph(module_sources())
    assert {"turbotrain.trainer", "turbotrain.measure.flops", "turbotrain.bench.runner"} <= set(graph)
    assert layer_violations(graph) == []


def test_the_package_has_no_import_circle():
    assert circles(import_graph(module_sources())) == []


def test_a_lazy_import_of_the_benchmark_and_a_circle_are_found(tmp_path):
    """The checks above would fail: a function-level import below the trainer, and a relative-import circle."""
    files = {
        "__init__.py": "",
        "bench/__init__.py": "",
        "bench/peak.py": "",
        "passes/__init__.py": "",
        "passes/a.py": "def f():\n    from turbotrain.bench import peak\n\nfrom . import b\n",
        "passes/b.py": "from .a import f\n",
    }
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    graph = import_graph(module_sources(tmp_path))
    assert layer_violations(graph) == ["turbotrain.passes.a imports turbotrain.bench.peak"]
    assert circles(graph) == [["turbotrain.passes.a", "turbotrain.passes.b"]]
