"""Ready names for TRL's preference and RL trainers: `TurboDPOTrainer` / `TurboDPOConfig`, `TurboKTOTrainer` /
`TurboKTOConfig`, `TurboGRPOTrainer` / `TurboGRPOConfig`, `TurboRLOOTrainer` / `TurboRLOOConfig`.

    from turbotrain import TurboDPOConfig, TurboDPOTrainer  # was: from trl import DPOConfig, DPOTrainer

They are `turbo(DPOTrainer)`, `turbo_arguments(DPOConfig)` (and KTO's, GRPO's, RLOO's), made once; what turbotrain
changes for each trainer is in passes/fused_head_calls.py (DPO's, KTO's and GRPO's per-row weighted log-probs, GRPO's with its
sampling temperature, RLOO's as GRPO's; their reference models' calls: passes/label_sparsity/reference_calls.py; GRPO's
generation stays TRL's)
and the run's summary line (where a trainer's calls are not answered, it says why: trl_boundary.py). Other
TRL trainers get the same with `turbo(...)`. TRL is the `llm` extra: importing this module without it raises an ImportError naming `pip install 'turbotrain[llm]'`.
"""

from __future__ import annotations

from turbotrain.args import turbo_arguments
from turbotrain.trainer import turbo
from turbotrain.utils.imports import require

require(
    "trl",
    "TurboDPOTrainer, TurboDPOConfig, TurboKTOTrainer, TurboKTOConfig, TurboGRPOTrainer, TurboGRPOConfig, "
    "TurboRLOOTrainer and TurboRLOOConfig",
)
from trl import (  # noqa: E402 - after the extra's error
    DPOConfig,
    DPOTrainer,
    GRPOConfig,
    GRPOTrainer,
    KTOConfig,
    KTOTrainer,
    RLOOConfig,
    RLOOTrainer,
)

TurboDPOConfig = turbo_arguments(DPOConfig)
TurboDPOTrainer = turbo(DPOTrainer)
TurboKTOConfig = turbo_arguments(KTOConfig)
TurboKTOTrainer = turbo(KTOTrainer)
TurboGRPOConfig = turbo_arguments(GRPOConfig)
TurboGRPOTrainer = turbo(GRPOTrainer)
TurboRLOOConfig = turbo_arguments(RLOOConfig)
TurboRLOOTrainer = turbo(RLOOTrainer)
