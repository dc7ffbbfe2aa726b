"""`optimize()` and `TurboTrainer` never raise where stock `Trainer` runs, on a model of every task mapping of
Transformers' auto classes (audio, vision, video, multimodal, time series, text): issue 27.

Per mapping (`MODEL_FOR_*_MAPPING_NAMES`, 53 in Transformers 5.24), the first class in `all_mappings.ranked`
order (the most used families first) whose tiny config builds and whose stock `Trainer` runs is built,
optimized (then undone), given to a `TurboTrainer`, and, where the mapping is a task
`scripts/architectures.py` makes data for, trained one step by each trainer (`all_mappings.construct`). A
class that cannot be built tiny or that stock fails on is passed over (at most TRIES per mapping, each named
in the skip reason when none is left); a turbotrain exception on any class fails. Every class of every mapping
(1,073) is run by `scripts/all_mappings.py`: see benchmarks/2026-12-01-cpu-architecture-sweep-all-tasks.md.
"""

from __future__ import annotations

import logging
import warnings

import pytest
import transformers
from scripts.all_mappings import construct, mapping_classes, mapping_names, ranked

TRIES = 4
MAPPINGS = [name[len("MODEL_FOR_") : -len("_MAPPING_NAMES")] for name in mapping_names()]


@pytest.fixture(autouse=True)
def quiet():
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    transformers.logging.set_verbosity(verbosity)


@pytest.mark.parametrize("mapping", MAPPINGS)
def test_turbotrain_never_raises_where_stock_runs(mapping, caplog):
    passed_over = []
    for row in ranked(mapping_classes([mapping]))[:TRIES]:
        with caplog.at_level(logging.ERROR, logger="turbotrain"):
            result = construct(row)
        assert result.status != "turbo crashed", f"{row.class_name}: {result.detail}"
        if result.status == "ok":
            return
        passed_over.append(f"{row.class_name}: {result.status} {result.detail[:60]}")
    pytest.skip(f"no class of {mapping} builds tiny and runs stock: " + "; ".join(passed_over))
