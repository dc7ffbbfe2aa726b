"""A pytest plugin that patches as `turbotrain run` does, for test suites: `pytest -p turbotrain.launch.pytest_plugin`.

`turbotrain run script.py` swaps Transformers' and TRL's Trainer and arguments names for turbotrain's before the
script starts (patch.py). A test suite is not one script: its test modules import `transformers` while pytest
collects them. Loaded with `-p`, this plugin is imported when pytest starts, before any `conftest.py` or test
module, and installs the same patch, with the options of `TURBOTRAIN_OPTIONS` (JSON, as for `turbotrain run`);
the names are put back when the session ends. So `from transformers import Trainer` in every test module gets
`TurboTrainer`, exactly as a script under `turbotrain run` would (scripts/hf_trainer_tests.py runs Transformers'
own Trainer tests so, beside a stock run).
"""

from __future__ import annotations

from turbotrain.launch.patch import install
from turbotrain.launch.run_options import checked, from_environment
from turbotrain.utils.warnings import quiet_cpu_pin_memory

quiet_cpu_pin_memory()
PATCH = install(checked(from_environment()))


def pytest_unconfigure(config):
    PATCH.undo()
