"""The artifacts every on-device test trains from: tiny BERT sequence classification, exported once per session."""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    from turbotrain import export_training_artifacts

    directory = tmp_path_factory.mktemp("artifacts")
    return export_training_artifacts(
        bert(), directory, trainable=TRAINABLE, learning_rate=LR, weight_decay=WEIGHT_DECAY
    )
