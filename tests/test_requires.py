"""The one way a test skips for a missing dependency: a `requires_<name>` marker (tests/requires.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest, requires
from turbotrain.utils.imports import EXTRA_OF_PACKAGE, extra_packages

TESTS = Path(__file__).parent
ROOT = TESTS.parent
RETIRED_MARKERS = {"onnx", "llm", "compile", "requires_optuna"}  # the custom markers the requires_ ones replace


def test_a_marked_test_is_skipped_naming_the_install_line(monkeypatch):
    added = []
    item = SimpleNamespace(
        iter_markers=lambda: [pytest.mark.requires_onnx.mark, pytest.mark.slow.mark], add_marker=added.append
    )
    monkeypatch.setitem(requires.REQUIREMENTS, "onnx", (lambda: True, "pip install 'turbotrain[onnx]'"))
    conftest.skip_missing_requirements([item])
    assert added == []  # installed: runs
    monkeypatch.setitem(requires.REQUIREMENTS, "onnx", (lambda: False, "pip install 'turbotrain[onnx]'"))
    conftest.skip_missing_requirements([item])
    assert [(m.name, m.kwargs["reason"]) for m in added] == [("skip", "needs pip install 'turbotrain[onnx]'")]


def test_an_unknown_requires_marker_is_an_error():
    with pytest.raises(ValueError, match="unknown marker 'requires_onx'"):
        requires.missing("requires_onx")


def test_every_extra_of_pyproject_has_a_marker_with_its_packages():
    section = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = {
        name: re.findall(r'"([A-Za-z0-9_-]+)', specs)
        for name, specs in re.findall(r"^(\w+) = \[(.*?)\]", section, re.M | re.S)
    }
    extras.pop("dev")
    extras.pop("gpucheck", None)  # the device check's peers (scripts/gpu_check.py), installed on a GPU machine only
    assert set(extras) == set(EXTRA_OF_PACKAGE.values()) and set(extras) <= set(requires.REQUIREMENTS)
    for extra, names in extras.items():
        assert set(names) == set(extra_packages(extra)), extra


def skip_calls(path: Path) -> list[str]:
    """Places a test module skips for a dependency another way: importorskip, a skipif on availability,
    or a retired custom marker."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "importorskip":
            found.append(f"{node.lineno}: importorskip")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in RETIRED_MARKERS
            and ast.unparse(node.value) == "pytest.mark"
        ):
            found.append(f"{node.lineno}: pytest.mark.{node.attr}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.skipif":
            condition = ast.unparse(node.args[0]) if node.args else ""
            if "available" in condition or "which" in condition:
                found.append(f"{node.lineno}: skipif({condition})")
    return sorted(found, key=lambda use: int(use.split(":")[0]))


def test_no_test_skips_for_a_dependency_any_other_way(tmp_path):
    offenders = [
        f"{path.relative_to(ROOT)}:{use}"
        for path in sorted(TESTS.rglob("*.py"))
        if path != Path(__file__)
        for use in skip_calls(path)
    ]
    assert not offenders, "use a requires_<extra> marker (tests/requires.py):\n" + "\n".join(offenders)
    sneaky = tmp_path / "test_sneaky.py"
    sneaky.write_text(
        "import pytest\nort = pytest.importorskip('onnxruntime')\n"
        "@pytest.mark.skipif(not is_available('jax'), reason='x')\n@pytest.mark.onnx\ndef test(): pass\n"
    )
    assert skip_calls(sneaky) == ["2: importorskip", "3: skipif(not is_available('jax'))", "4: pytest.mark.onnx"]
