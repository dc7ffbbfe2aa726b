"""`pytest -p turbotrain.launch.pytest_plugin`: a test suite's modules import turbotrain's classes under the
stock names, as a script under `turbotrain run` does (scripts/hf_trainer_tests.py runs Transformers' tests so)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import turbotrain

TEST_MODULE = """
from transformers import Trainer, TrainingArguments


def test_the_names_are_turbotrains():
    assert Trainer.__name__ == "TurboTrainer" and TrainingArguments.__name__ == "TurboTrainingArguments"
    assert TrainingArguments(output_dir="out").backend == "eager"  # TURBOTRAIN_OPTIONS' default
"""


def test_the_plugin_patches_before_test_modules_import_transformers(tmp_path):
    (tmp_path / "test_names.py").write_text(TEST_MODULE)
    package = str(Path(turbotrain.__file__).parents[1])
    env = dict(os.environ, PYTHONPATH=package, TURBOTRAIN_OPTIONS='{"backend": "eager"}')
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "turbotrain.launch.pytest_plugin"]
    done = subprocess.run([*command, "test_names.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
