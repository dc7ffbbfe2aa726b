"""One `requires_<name>` marker per optional dependency (accelerate's `require_x`), the only way a test
skips for something not installed: mark a test `@pytest.mark.requires_onnx` (a module:
`pytestmark = pytest.mark.requires_onnx`) and it is skipped, with the line that installs what it needs,
where that is missing (tests/conftest.py applies them). Deselect with `-m "not requires_onnx"`.

Names: every extra of pyproject.toml (`requires_onnx`, `requires_xla`, `requires_hpo`,
`requires_deepspeed`, `requires_llm`, `requires_plot`, `requires_diffusion`: all of its packages, from
turbotrain/utils/imports.py), and two system tools: `requires_espeak` (espeak-ng, the speech data) and
`requires_compiler` (a C++ compiler: inductor on CPU). An unknown `requires_` name is an error.
A module that needs the dependency at import time imports it inside its tests (or through `lazy_module`).
"""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Callable

from turbotrain.utils.imports import EXTRA_OF_PACKAGE, extra_packages, is_available

PREFIX = "requires_"


def _extra_available(extra: str) -> Callable[[], bool]:
    return lambda: all(is_available(package) for package in extra_packages(extra))


def _espeak_available() -> bool:
    from turbotrain.data.speech import espeak_available

    return espeak_available()


REQUIREMENTS: dict[str, tuple[Callable[[], bool], str]] = {
    **{
        extra: (_extra_available(extra), f"pip install 'turbotrain[{extra}]' ({', '.join(extra_packages(extra))})")
        for extra in sorted(set(EXTRA_OF_PACKAGE.values()))
    },
    "espeak": (_espeak_available, "espeak-ng: apt-get install -y espeak-ng (scripts/install-speech.sh)"),
    "compiler": (lambda: bool(shutil.which("g++") or shutil.which("c++")), "a C++ compiler (g++) on PATH"),
    "liger": (
        lambda: is_available("liger_kernel"),
        "liger-kernel (a GPU image's carried wheel: scripts/gpu_wheels.sh)",
    ),
}


def missing(marker: str) -> str | None:
    """The skip reason for a `requires_<name>` marker whose dependency is missing, else None."""
    name = marker.removeprefix(PREFIX)
    if name not in REQUIREMENTS:
        raise ValueError(f"unknown marker {marker!r}; the requires_ markers are {', '.join(marker_names())}")
    available, install = REQUIREMENTS[name]
    return None if available() else f"needs {install}"


def marker_names() -> list[str]:
    return [PREFIX + name for name in REQUIREMENTS]


class lazy_module:  # noqa: N801 - stands for a module
    """A module imported on first use, for test modules whose tests all carry the module's marker."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        return getattr(importlib.import_module(self._name), attribute)
