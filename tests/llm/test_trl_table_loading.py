"""TRL's table reaches `turbo()` however it is imported: trainer.py's `load_integrations` imports the table of each
library a trainer class is built on from the `turbotrain.integrations` entry points (pyproject.toml). Before it,
`from turbotrain.trainer import turbo` (not the lazy front) made a `TurboSFTTrainer` without TRL's row: no token
count mixin, no facts, no hand-over of the arguments. Each check runs in a fresh interpreter, since any earlier
import of `turbotrain.integrations` in this process would register the table anyway."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

pytestmark = pytest.mark.requires_llm


def fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_trl_table_is_declared_as_an_entry_point():
    entries = {e.name: e.value for e in importlib.metadata.entry_points(group="turbotrain.integrations")}
    assert entries.get("trl") == "turbotrain.integrations.trl"


def test_turbo_imported_from_the_trainer_layer_knows_trl_trainers():
    out = fresh(
        "from turbotrain.trainer import turbo, _INTEGRATIONS\n"
        "print(len(_INTEGRATIONS))\n"
        "from trl import SFTTrainer\n"
        "from turbotrain.boundaries.trl_boundary import TrlTokenCount\n"
        "cls = turbo(SFTTrainer)\n"
        "print(len(_INTEGRATIONS), issubclass(cls, TrlTokenCount))\n"
    )
    assert out.splitlines() == ["0", "1 True"]  # nothing registered on import; TRL's table once a TRL class came


def test_a_class_of_a_library_without_a_table_imports_none():
    out = fresh(
        "import sys\n"
        "from transformers import Trainer\n"
        "from turbotrain.trainer import turbo, _INTEGRATIONS\n"
        "Mine = type('Mine', (Trainer,), {})\n"
        "turbo(Mine)\n"
        "print(len(_INTEGRATIONS), 'turbotrain.integrations' in sys.modules, 'trl' in sys.modules)\n"
    )
    assert out == "0 False False"


def test_without_the_metadata_a_library_class_is_said_to_get_no_table():
    out = fresh(
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format='%(message)s')\n"
        "import turbotrain.trainer as trainer\n"
        "trainer.integration_entry_points = lambda: {}  # as from a source folder on PYTHONPATH\n"
        "from trl import SFTTrainer\n"
        "trainer.turbo(SFTTrainer)\n"
    )
    assert "declares no trainer-library tables" in out and "so trl's trainers get none here" in out
