"""A pytest plugin for running a TRL checkout's tests against another installed TRL: `-p trl_tests_plugin`
(scripts/ on PYTHONPATH), loaded in both runs of `scripts/hf_trainer_tests.py --suite trl`.

A test module that imports one name the installed TRL lacks fails to import, and every test in it is lost. Loaded
with `-p`, this plugin sets each name of MISSING that the installed TRL lacks before any test module is imported:
an `is_*_available` check answers whether the package is installed; a removed function is a stand-in that raises
`NotImplementedError` when called, so only the tests that call it fail (stock and turbotrain alike). A name the
installed TRL has is left alone. MISSING lists the names TRL 1.10's trainer tests import that TRL 1.16 lacks.
"""

from __future__ import annotations

import importlib
import importlib.util

MISSING = {
    "trl.import_utils": {"is_joblib_available": "joblib"},
    "trl.trainer.sft_trainer": {
        "_chunked_cross_entropy_loss": None,
        "_patch_chunked_ce_lm_head": None,
        "dft_loss": None,
    },
}


def _available(package: str):
    def is_available() -> bool:
        return importlib.util.find_spec(package) is not None

    is_available.__name__ = f"is_{package}_available"
    return is_available


def _removed(module: str, name: str):
    def removed(*args, **kwargs):
        raise NotImplementedError(f"{module}.{name} is not in the installed TRL (trl_tests_plugin's stand-in)")

    removed.__name__ = name
    return removed


def install() -> list[str]:
    """Sets the missing names; returns them as `module.name`."""
    added = []
    for module_name, names in MISSING.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name, package in names.items():
            if not hasattr(module, name):
                setattr(module, name, _available(package) if package else _removed(module_name, name))
                added.append(f"{module_name}.{name}")
    return added


ADDED = install()


def pytest_report_header(config):
    return f"trl_tests_plugin: stand-ins for {', '.join(ADDED) or 'nothing'}"
