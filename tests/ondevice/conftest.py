"""The artifacts every on-device test trains from: tiny BERT sequence classification, exported once per run.

Under pytest-xdist (the README's `-n 2 --dist loadfile`) the files of this folder can land on different
workers: the first worker to need the artifacts exports them into the run's shared temporary folder, under a
file lock, and every other worker reads that folder instead of exporting the same graphs again."""

from __future__ import annotations

import os

import pytest

from tests import tiny_models

TRAINABLE_PREFIXES = ("classifier.", "bert.pooler.", "bert.encoder.layer.1.")
LR, WEIGHT_DECAY = 3e-3, 0.01
# Two labels and an export example batch of 2: this caught the exporter fusing the batch axis with the
# head's 2 rows (duck-shaped symbols), which made the graphs accept only batches of 2.
NUM_LABELS = 2


def TRAINABLE(name: str) -> bool:
    """Head, pooler and last layer. Not the key bias: its true gradient is zero (softmax ignores a shift
    along the key axis), so AdamW turns float rounding noise into +-lr steps in torch and ORT alike."""
    return name.startswith(TRAINABLE_PREFIXES) and not name.endswith("attention.self.key.bias")


def bert():
    return tiny_models.make("bert", task="cls", dropout=False, num_labels=NUM_LABELS)


def export(directory):
    from turbotrain import export_training_artifacts

    return export_training_artifacts(
        bert(), directory, trainable=TRAINABLE, learning_rate=LR, weight_decay=WEIGHT_DECAY
    )


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """Read-only: a test that changes the artifacts works on its own copy."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return export(tmp_path_factory.mktemp("artifacts"))
    from filelock import FileLock

    from turbotrain.export.training import TrainingArtifacts
    from turbotrain.ondevice import Manifest

    # the workers' base folders (pytest-N/popen-gwK) share their parent, which is this run's own
    shared = tmp_path_factory.getbasetemp().parent / "ondevice-artifacts"
    with FileLock(f"{shared}.lock"):
        if not (shared / "manifest.json").is_file():  # written last: a complete export
            return export(shared)
    return TrainingArtifacts(shared, Manifest.load(shared))
