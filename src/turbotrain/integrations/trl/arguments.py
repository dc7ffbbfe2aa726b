"""TRL's rebuild of the arguments it is given, made to keep turbotrain's options.

`SFTTrainer` rebuilds arguments that are not an `SFTConfig` as `SFTConfig(**args.to_dict())`; for turbo
arguments (`TurboTrainingArguments`, or `TrainingArguments` under `turbotrain run`) that raised on
turbotrain's options, and turbotrain's `padding_free` would have become TRL's. `as_sft_config` hands such
arguments over as a `TurboSFTConfig` instead, built the way TRL builds its own (`args.rebuilt_as`). The TRL
integration registers it as its `hand_over` (trainer.py's `register_integration`): the trainer asks it before
Trainer's `__init__`.
"""

from __future__ import annotations

from turbotrain.args import TurboArgumentsMixin, rebuilt_as
from turbotrain.boundaries.trl_boundary import is_sft_trainer, public_classes


def as_sft_config(trainer_class: type, positional: tuple, keywords: dict) -> tuple[tuple, dict]:
    """A Trainer call's arguments, its `args` a `TurboSFTConfig` where `trainer_class` is an SFTTrainer given turbo
    arguments of another class (`SFTTrainer(model, args=None, ...)`: `args` is the second positional one)."""
    given = positional[1] if len(positional) > 1 else keywords.get("args")
    if not (isinstance(given, TurboArgumentsMixin) and is_sft_trainer(trainer_class)):
        return positional, keywords
    (config_class,) = public_classes(("SFTConfig",), "TurboSFTTrainer")
    if isinstance(given, config_class):
        return positional, keywords
    converted = rebuilt_as(given, config_class)
    if len(positional) > 1:
        return (positional[0], converted, *positional[2:]), keywords
    return positional, {**keywords, "args": converted}
