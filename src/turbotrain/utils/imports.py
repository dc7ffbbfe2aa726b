"""Guards for optional dependencies.

Each optional part of turbotrain lives in an extra. `is_available(package)` answers without importing the
package; `require(package, feature)` raises an ImportError that names the extra to install.
"""

from __future__ import annotations

import importlib.util
from functools import cache

EXTRA_OF_PACKAGE = {
    "onnxruntime": "onnx",
    "onnx": "onnx",
    "onnxscript": "onnx",
    "jax": "xla",
    "jaxlib": "xla",
    "torchax": "xla",
    "optax": "xla",
    "optuna": "hpo",
    "deepspeed": "deepspeed",
    "matplotlib": "plot",
    "peft": "llm",
    "trl": "llm",
    "diffusers": "diffusion",
}


@cache
def is_available(package: str) -> bool:
    """True when `package` can be imported (checked by spec, without importing it)."""
    return importlib.util.find_spec(package) is not None


def is_trl_available() -> bool:
    return is_available("trl")


def extra_packages(extra: str) -> tuple[str, ...]:
    """The packages the extra `extra` installs (pyproject's optional dependencies, as named above)."""
    return tuple(package for package, owner in EXTRA_OF_PACKAGE.items() if owner == extra)


def require(package: str, feature: str) -> None:
    """Raise a clear ImportError naming the extra that provides `package` for `feature`."""
    if is_available(package):
        return
    extra = EXTRA_OF_PACKAGE.get(package)
    hint = f"pip install 'turbotrain[{extra}]'" if extra else f"pip install {package}"
    raise ImportError(f"{feature} needs the '{package}' package, which is not installed. Install it with: {hint}")
