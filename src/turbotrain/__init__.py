"""turbotrain: faster, leaner Transformers training by swapping two names.

    from turbotrain import TurboTrainer, TurboTrainingArguments   # was: Trainer, TrainingArguments

`optimize(model)` installs the same exact passes for a plain `Trainer` or a custom loop.
"""

from turbotrain.args import TurboOptions, TurboTrainingArguments
from turbotrain.passes import fused_adamw, optimize
from turbotrain.trainer import TurboTrainer

__version__ = "0.1.0"

__all__ = ["TurboOptions", "TurboTrainer", "TurboTrainingArguments", "__version__", "fused_adamw", "optimize"]
