"""Help text for the command line without where the code lives: option and field help in the source names its
module ("(passes/fused_lora.py)", "cached per machine; backends/auto.py)") for a reader of the code; a user of
`turbotrain ... --help` is given the sentence without it."""

from __future__ import annotations

import re

PATH = r"(?:[\w.]+/)*\w+(?:/|\.py)"  # a folder ("passes/chunked_ce/") or a module ("token_budget.py")
ALONE = re.compile(rf"\s*\({PATH}\)")  # "... kernel (passes/fused_lora.py)" -> "... kernel"
LAST = re.compile(rf";\s*{PATH}\)")  # "(exact; passes/label_sparsity/)" -> "(exact)"
FIRST = re.compile(rf"\({PATH};\s*")  # "(token_budget.py; pairs well ...)" -> "(pairs well ...)"


def without_source_paths(text: str) -> str:
    return FIRST.sub("(", LAST.sub(")", ALONE.sub("", text)))
