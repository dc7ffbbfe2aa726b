"""Zero-edit mode: `turbotrain run script.py args` / `python -m turbotrain script.py args` runs an unmodified
Trainer script with turbotrain's classes (run.py: the runner; patch.py: the names swapped; options.py:
turbotrain's options from flags and `TURBOTRAIN_OPTIONS`). Importing this package patches nothing."""

from turbotrain.launch.run import main

__all__ = ["main"]
