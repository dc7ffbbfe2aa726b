"""scripts/ has no import circle: its modules parsed with `ast` (imports inside functions counted too), as
tests/test_layers.py reads the package."""

from __future__ import annotations

from pathlib import Path

from tests.test_layers import circles, import_graph, module_sources

SCRIPTS_DIR = Path(__file__).resolve().parents[2] / "scripts"


def test_the_scripts_have_no_import_circle():
    graph = import_graph(module_sources(SCRIPTS_DIR, package="scripts"))
    assert "scripts.gpu_check_parity" in graph["scripts.gpu_check"]  # the scripts' own imports are read
    assert circles(graph) == []


def test_a_lazy_circle_between_scripts_is_found(tmp_path):
    (tmp_path / "bench.py").write_text("def losses():\n    from scripts.parity import batch\n")
    (tmp_path / "parity.py").write_text("from scripts import bench\n")
    assert circles(import_graph(module_sources(tmp_path, package="scripts"))) == [["scripts.bench", "scripts.parity"]]
