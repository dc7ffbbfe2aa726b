"""The ready names of TRL's trainers, one pair per row of the table (`TRAINERS`): `TurboSFTTrainer` /
`TurboSFTConfig`, `TurboDPOTrainer` / `TurboDPOConfig`, KTO's, GRPO's and RLOO's, each `turbo(XTrainer)` and
`turbo_arguments(XConfig)`, made once.

    from turbotrain import TurboDPOConfig, TurboDPOTrainer  # was: from trl import DPOConfig, DPOTrainer

TRL is the `llm` extra: importing this module without it raises an ImportError naming `pip install 'turbotrain[llm]'`.
"""

from __future__ import annotations

from turbotrain.args import turbo_arguments
from turbotrain.integrations.trl import TRAINERS, classes
from turbotrain.trainer import turbo

NAMES = tuple(f"Turbo{name}" for row in TRAINERS for name in (row.trainer, row.config))

for _row in TRAINERS:
    _config, _trainer = classes(_row.name, ", ".join(NAMES))
    globals()[f"Turbo{_row.config}"] = turbo_arguments(_config)
    globals()[f"Turbo{_row.trainer}"] = turbo(_trainer)
