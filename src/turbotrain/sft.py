"""`TurboSFTTrainer` and `TurboSFTConfig`: TRL's `SFTTrainer` and `SFTConfig` with turbotrain, by name.

    from turbotrain import TurboSFTConfig, TurboSFTTrainer  # was: from trl import SFTConfig, SFTTrainer

They are `turbo(SFTTrainer)` and `turbo_arguments(SFTConfig)`, made once. TRL is the `llm` extra:
importing this module without it raises an ImportError naming `pip install 'turbotrain[llm]'`.
"""

from __future__ import annotations

from turbotrain.args import turbo_arguments
from turbotrain.trainer import turbo
from turbotrain.trl_boundary import sft_classes

SFTConfig, SFTTrainer = sft_classes("TurboSFTTrainer and TurboSFTConfig")
TurboSFTConfig = turbo_arguments(SFTConfig)
TurboSFTTrainer = turbo(SFTTrainer)
