"""turbotrain: faster, leaner Transformers training by swapping two names.

    from turbotrain import TurboTrainer, TurboTrainingArguments   # was: Trainer, TrainingArguments

Ready names for the common subclasses: `TurboSeq2SeqTrainer` / `TurboSeq2SeqTrainingArguments`, and
`TurboSFTTrainer` / `TurboSFTConfig`, `TurboDPOTrainer` / `TurboDPOConfig`, `TurboKTOTrainer` / `TurboKTOConfig`,
`TurboGRPOTrainer` / `TurboGRPOConfig`, `TurboRLOOTrainer` / `TurboRLOOConfig` (TRL, the llm extra). Any other Trainer subclass gets the same with
`turbo(MyTrainer)` and `turbo_arguments(MyArguments)`.
`optimize(model)` installs the same exact passes for a plain `Trainer` or a custom loop;
`compile(module, backend=...)` puts any module's training step (a diffusers UNet...) on a backend;
`export_onnx` and `export_training_artifacts` export for deployment and on-device training.
Names are imported on first use, so `turbotrain.ondevice` loads on devices without torch.
"""

from __future__ import annotations

from turbotrain.utils.lazy_names import lazy_names

__version__ = "0.1.0"

_LAZY = {
    "TurboOptions": "turbotrain.args",
    "TurboTrainingArguments": "turbotrain.args",
    "TurboTrainer": "turbotrain.trainer",
    "TurboSeq2SeqTrainingArguments": "turbotrain.args",
    "TurboSeq2SeqTrainer": "turbotrain.trainer",
    "turbo": "turbotrain.integrations",  # turbo() with every integration's table registered (TRL's)
    "turbo_arguments": "turbotrain.args",
    "fused_adamw": "turbotrain.passes",
    "optimize": "turbotrain.passes",
    "export_onnx": "turbotrain.export",
    "export_training_artifacts": "turbotrain.export",
    "compile": "turbotrain.training.compile_module",  # not a module named compile: importing it would shadow the function
}

# TRL's ready names, one pair per row of integrations/trl/'s table: they need trl (the llm extra), a clear
# ImportError naming it otherwise
TRL_NAMES = tuple(
    f"Turbo{name}{kind}" for name in ("SFT", "DPO", "KTO", "GRPO", "RLOO") for kind in ("Trainer", "Config")
)
_LAZY.update(dict.fromkeys(TRL_NAMES, "turbotrain.integrations.trl.ready"))

__all__ = [*sorted(_LAZY), "__version__"]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
