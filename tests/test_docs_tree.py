"""docs/layout.md and docs/architecture.md name exactly the package's top: every folder right under
`src/turbotrain/` (`passes/`) and every module standing there (`trainer.py`), as the tree has them today, and
nothing that is gone.

* layout.md: its fenced tree, one entry a line under `src/turbotrain/`, indented two spaces; the entry's head
  (up to the first double space) names one unit, or several separated by ", " (`hf_boundary.py, torch_boundary.py`).
* architecture.md: the numbered list of its "## Layers" section names each unit in a code span; any other
  module or folder it names there (`cache.py`) is one of the package's, at any depth.

The units come from the tree (`tree_units`), so a module moved into a folder fails this test until both pages
say so.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "turbotrain"
DOCS = ROOT / "docs"
CODE_SPAN = re.compile(r"`([^`\n]+)`")
MODULE_OR_FOLDER = re.compile(r"[\w.]+\.py|\w+/")


def tree_units(package: Path = PACKAGE) -> set[str]:
    """The package's top: each folder with an `__init__.py` as `name/`, each module as `name.py`."""
    folders = {f"{path.name}/" for path in package.iterdir() if (path / "__init__.py").is_file()}
    return folders | {path.name for path in package.glob("*.py")}


def layout_units(text: str) -> list[str]:
    """The units layout.md's tree names, one entry a line under `src/turbotrain/` (in order, repeats kept)."""
    block = text.split("```")[1]
    entries = block.split("src/turbotrain/\n", 1)[1]
    heads = [re.split(r"\s{2,}", line.strip())[0] for line in entries.splitlines() if re.match(r"  \S", line)]
    return [name for head in heads for name in head.split(", ")]


def layers_list(text: str) -> str:
    """The numbered list of architecture.md's "## Layers" section."""
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    return section[section.index("\n1. ") :].split("\n\n", 1)[0]


def named_modules(text: str) -> set[str]:
    """The modules and folders `text` names in code spans (`cache.py`, `utils/`)."""
    return {
        word
        for span in CODE_SPAN.findall(text)
        for word in re.split(r"[\s,]+", span)
        if MODULE_OR_FOLDER.fullmatch(word)
    }


def package_names(package: Path = PACKAGE) -> set[str]:
    """Every module and folder name in the package, at any depth."""
    return {f"{p.name}/" if p.is_dir() else p.name for p in package.rglob("*") if p.suffix == ".py" or p.is_dir()}


def test_layout_names_every_unit_of_the_package_once():
    named = layout_units((DOCS / "layout.md").read_text(encoding="utf-8"))
    assert sorted(set(named) - tree_units()) == [], "named in docs/layout.md, not in src/turbotrain/"
    assert sorted(tree_units() - set(named)) == [], "in src/turbotrain/, not named in docs/layout.md"
    assert sorted(name for name in set(named) if named.count(name) > 1) == []


def test_architecture_layers_name_every_unit_and_nothing_gone():
    named = named_modules(layers_list((DOCS / "architecture.md").read_text(encoding="utf-8")))
    assert sorted(tree_units() - named) == [], "in src/turbotrain/, not given a layer in docs/architecture.md"
    assert sorted(named - package_names()) == [], "named in docs/architecture.md's layers, not in the package"


def test_a_moved_module_is_found(tmp_path):
    (tmp_path / "passes").mkdir()
    (tmp_path / "passes" / "__init__.py").write_text("")
    (tmp_path / "trainer.py").write_text("")
    (tmp_path / "cache").mkdir()  # no __init__.py: not a package folder
    assert tree_units(tmp_path) == {"passes/", "trainer.py"}
    page = "```\nsrc/turbotrain/\n  passes/      the passes\n  args.py, trainer.py  the trainer\n               more\n```\n"
    assert layout_units(page) == ["passes/", "args.py", "trainer.py"]
    assert named_modules("1. `passes/` (`cache.py`: the cache), `$HOME`, `trainer.py`") == {
        "passes/",
        "cache.py",
        "trainer.py",
    }
