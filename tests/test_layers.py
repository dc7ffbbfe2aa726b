"""The package's layers, read from its source: every module parsed with `ast`, imports inside functions
counted too (a lazy import is still a dependency).

Folders are layers. A unit is a folder right under `src/turbotrain/` (`passes/`, `backends/`...) or a module
standing at the top (`trainer.py`, `hf_boundary.py`...); each unit belongs to one layer (`LAYERS`, lowest
first; why each stands where it does: docs/architecture.md, "Layers"), and a unit imports only units of its
own layer or of the layers below.

No circle between units (a folder with its subfolders is one unit: `backends/` registers `backends/xla/`,
which builds on `backends/base.py`), and no import circle between modules. A unit missing from `LAYERS`
fails the test (a new folder or top module is placed on purpose), and so does a unit `LAYERS` names that
is gone.

An import resolves to the most specific module that exists (`from turbotrain.passes.padding_free import packing`
is `turbotrain.passes.padding_free.packing`; `from turbotrain.backends import get_backend` is the package
`turbotrain.backends`), as the import system finds it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import turbotrain

PACKAGE_DIR = Path(turbotrain.__file__).parent
LAYERS = (
    # the boundaries with other libraries' private names, the utilities (the private batch keys among them), and the
    # on-device runtime (no torch)
    ("ground", ("utils", "boundaries", "ondevice")),
    ("modeling", ("modeling", "measure")),
    ("passes", ("passes", "export")),  # the exact rewrites: in PyTorch, and into ONNX training graphs
    ("backends", ("backends",)),
    ("trainer and args", ("trainer", "args", "training")),  # training/: what only they and those above use
    ("integrations", ("integrations",)),  # the tables of trainer libraries (TRL's), read by the layers above
    ("launch", ("launch", "__init__")),  # __init__: the lazy front, the integrations' ready names among its
    ("bench and pretrain", ("bench", "pretrain", "data")),
    ("cli", ("cli", "__main__")),
)
LAYER_OF = {unit: level for level, (_, units) in enumerate(LAYERS) for unit in units}


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


def unit_of(module: str) -> str:
    """The folder right under the package (`passes`), or the top module (`trainer`; `__init__` for the package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def unit_graph(graph: dict[str, set[str]], unit) -> dict[str, set[str]]:
    """The module graph seen from units (`unit(module)`): an arrow wherever a module of one imports one of another."""
    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        units.setdefault(unit(module), set()).update(unit(target) for target in targets)
    return {name: targets - {name} for name, targets in units.items()}


def unplaced_units(graph: dict[str, set[str]]) -> list[str]:
    return sorted({unit_of(module) for module in graph} - set(LAYER_OF))


def stale_units(graph: dict[str, set[str]]) -> list[str]:
    """Units `LAYERS` names that no module is (a folder or module gone: its line goes too)."""
    return sorted(set(LAYER_OF) - {unit_of(module) for module in graph})


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a unit of a higher layer, named module by module."""
    return sorted(
        f"{module} ({LAYERS[LAYER_OF[unit_of(module)]][0]}) imports {target} ({LAYERS[LAYER_OF[unit_of(target)]][0]})"
        for module, targets in graph.items()
        for target in targets
        if LAYER_OF.get(unit_of(target), -1) > LAYER_OF.get(unit_of(module), len(LAYERS))
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


def test_every_folder_and_top_module_has_its_layer():
    graph = import_graph(module_sources())
    assert {"turbotrain.trainer", "turbotrain.measure.flops", "turbotrain.bench.runner"} <= set(graph)
    assert unplaced_units(graph) == []
    assert stale_units(graph) == []


def test_no_unit_imports_a_layer_above_its_own():
    assert layer_violations(import_graph(module_sources())) == []


def test_no_circle_between_folders():
    assert circles(unit_graph(import_graph(module_sources()), unit_of)) == []


def test_the_package_has_no_import_circle():
    assert circles(import_graph(module_sources())) == []


def test_a_lazy_import_upward_and_circles_are_found(tmp_path):
    """The checks above would fail: a function-level import of a higher layer, a module circle, a circle of
    folders that no module circle shows (a.py -> backends/x.py, backends/y.py -> a.py), and a new folder."""
    files = {
        "__init__.py": "",
        "bench/__init__.py": "",
        "bench/peak.py": "",
        "backends/__init__.py": "",
        "backends/x.py": "",
        "backends/y.py": "from turbotrain.passes import a\n",
        "passes/__init__.py": "",
        "passes/a.py": "def f():\n    from turbotrain.bench import peak\n\nfrom . import b\nfrom ..backends import x\n",
        "passes/b.py": "from .a import f\n",
        "newfolder/__init__.py": "",
    }
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    graph = import_graph(module_sources(tmp_path))
    assert layer_violations(graph) == [
        "turbotrain.passes.a (passes) imports turbotrain.backends.x (backends)",
        "turbotrain.passes.a (passes) imports turbotrain.bench.peak (bench and pretrain)",
    ]
    assert circles(graph) == [["turbotrain.passes.a", "turbotrain.passes.b"]]
    assert circles(unit_graph(graph, unit_of)) == [["backends", "passes"]]
    assert unplaced_units(graph) == ["newfolder"]
    assert "trainer" in stale_units(graph) and "passes" not in stale_units(graph)
