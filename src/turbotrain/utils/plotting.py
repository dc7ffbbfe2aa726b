"""matplotlib for the PNG charts: the `plot` extra, always on the headless Agg backend."""

from __future__ import annotations

from turbotrain.utils.imports import is_available, require


def is_matplotlib_available() -> bool:
    return is_available("matplotlib")


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed); ImportError naming the extra if missing."""
    require("matplotlib", "PNG charts")
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt
