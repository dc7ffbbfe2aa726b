"""Less noise in the main job's output: only what tells the user something stays.

Dropped: DeepSpeed's "Setting accelerator to CPU" warning (printed when Transformers probes the
installed deepspeed package, which this job never uses), the "Writing model shards" bar of every
save, and torch's pin_memory UserWarning on machines without an accelerator (the job also turns
pin_memory off); on `--resume`, Trainer's "There were missing keys in the checkpoint model loaded:
['lm_head.decoder.weight', 'lm_head.decoder.bias']" when every key it names is a tied parameter whose partner
was loaded (`quiet_tied_missing_keys`: the decoder is the word embeddings' and the head's bias, one tensor each;
the checkpoint holds them once, under the other name). A missing key that is not tied is still said. Kept: the
progress bar and the loss logs (progress.py), and every other warning.
"""

from __future__ import annotations

import ast
import contextlib
import logging

from transformers.utils import logging as hf_logging

from turbotrain.utils.warnings import quiet_cpu_pin_memory


def _not_accelerator_probe(record: logging.LogRecord) -> bool:
    return "Setting accelerator to CPU" not in record.getMessage()


def quiet_libraries() -> None:
    logging.getLogger("DeepSpeed").addFilter(_not_accelerator_probe)
    hf_logging.disable_progress_bar()  # save_pretrained's shard bar; Trainer's own bar uses tqdm directly
    quiet_cpu_pin_memory()


MISSING_KEYS = "There were missing keys in the checkpoint model loaded: "  # Trainer's words, then a list


def tied_groups(model) -> list[set[str]]:
    """The names of each parameter that has more than one (tied weights)."""
    names: dict[int, set[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), set()).add(name)
    return [group for group in names.values() if len(group) > 1]


def only_tied(missing: set[str], groups: list[set[str]]) -> bool:
    """Every missing name is tied to a name that is not missing (so loading it loaded them all)."""
    return bool(missing) and all(any(name in g and g - missing for g in groups) for name in missing)


class _TiedKeysFilter(logging.Filter):
    def __init__(self, groups: list[set[str]]):
        super().__init__()
        self.groups = groups

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(MISSING_KEYS):
            return True
        try:
            missing = set(ast.literal_eval(message[len(MISSING_KEYS) :].rstrip(".")))
        except (ValueError, SyntaxError, TypeError):
            return True
        return not only_tied(missing, self.groups)


@contextlib.contextmanager
def quiet_tied_missing_keys(model):
    """While inside: Trainer's missing-keys warning is dropped when it names only `model`'s tied parameters."""
    logger, keep = logging.getLogger("transformers.trainer"), _TiedKeysFilter(tied_groups(model))
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)
