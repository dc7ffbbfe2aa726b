"""Warnings that are printed once per process and message, loudly, through `warnings` and logging."""

from __future__ import annotations

import logging
import warnings

logger = logging.getLogger("turbotrain")
_already_warned: set[str] = set()


class TurbotrainWarning(UserWarning):
    """A turbotrain optimization could not apply as asked; training goes on without it."""


def warn_once(message: str) -> None:
    """Emit `message` as a TurbotrainWarning and a log record, the first time only."""
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
