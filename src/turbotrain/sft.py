"""`TurboSFTTrainer` and `TurboSFTConfig`: TRL's `SFTTrainer` and `SFTConfig` with turbotrain, by name.

    from turbotrain import TurboSFTConfig, TurboSFTTrainer  # was: from trl import SFTConfig, SFTTrainer

They are `turbo(SFTTrainer)` and `turbo_arguments(SFTConfig)`, made once. TRL is the `llm` extra:
importing this module without it raises an ImportError naming `pip install 'turbotrain[llm]'`.
"""

from __future__ import annotations

from turbotrain.utils.imports import require

require("trl", "TurboSFTTrainer and TurboSFTConfig")

from trl import SFTConfig, SFTTrainer  # noqa: E402

from turbotrain.args import turbo_arguments  # noqa: E402
from turbotrain.trainer import turbo  # noqa: E402

TurboSFTConfig = turbo_arguments(SFTConfig)
TurboSFTTrainer = turbo(SFTTrainer)
