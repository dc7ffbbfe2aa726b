"""Warnings that are printed once per process and message, loudly, and only once on screen.

`warn_once(message)` logs the message at WARNING level (logger "turbotrain": the line users see) and
issues it as a `TurbotrainWarning`, so that it can be caught or made an error
(`pytest.warns(TurbotrainWarning)`, `warnings.simplefilter("error", TurbotrainWarning)`,
`python -W error::UserWarning`). Python's own display of that warning (`optimize.py:85:
TurbotrainWarning: ...` and the source line, after the same text) is turned off by a filter appended
at the end of the filter list, so any filter a user or a test runner adds still decides first.

`quiet_cpu_pin_memory()`: on a machine with no accelerator, torch's "'pin_memory' argument is set as
true but no accelerator is found" UserWarning (Trainer's `dataloader_pin_memory` defaults to True, and
every dataloader warns) is silenced: pinning is a no-op there, so it says nothing to act on.
"""

from __future__ import annotations

import logging
import warnings

logger = logging.getLogger("turbotrain")
_already_warned: set[str] = set()
PIN_MEMORY_MESSAGE = ".*'pin_memory' argument is set as true but no accelerator is found"


class TurbotrainWarning(UserWarning):
    """A turbotrain optimization could not apply as asked; training goes on without it."""


warnings.filterwarnings("ignore", category=TurbotrainWarning, append=True)  # the log record is what shows


def warn_once(message: str) -> None:
    """Emit `message` as a log record and a TurbotrainWarning (not displayed twice), the first time only."""
    if message in _already_warned:
        return
    _already_warned.add(message)
    logger.warning(message)
    warnings.warn(message, TurbotrainWarning, stacklevel=3)


def log_once(message: str, level: int = logging.INFO) -> None:
    """Log `message` the first time only, no Python warning: INFO for a step aside that changes no number,
    WARNING for what example scripts (which hide INFO) should show."""
    if message in _already_warned:
        return
    _already_warned.add(message)
    logger.log(level, message)


def has_accelerator() -> bool:
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "is_available"):
        return accelerator.is_available()
    return torch.cuda.is_available()


def quiet_cpu_pin_memory() -> None:
    """Silence torch's pin_memory warning where there is no accelerator (see the module docstring)."""
    if not has_accelerator():
        warnings.filterwarnings("ignore", message=PIN_MEMORY_MESSAGE, category=UserWarning)
