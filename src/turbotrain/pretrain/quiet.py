"""Less noise in the main job's output: only what tells the user something stays.

Dropped: DeepSpeed's "Setting accelerator to CPU" warning (printed when Transformers probes the
installed deepspeed package, which this job never uses), the "Writing model shards" bar of every
save, and torch's pin_memory UserWarning on machines without an accelerator (the job also turns
pin_memory off). Kept: Trainer's progress bar and its loss logs, and every other warning.
"""

from __future__ import annotations

import logging

from transformers.utils import logging as hf_logging

from turbotrain.utils.warnings import quiet_cpu_pin_memory


def _not_accelerator_probe(record: logging.LogRecord) -> bool:
    return "Setting accelerator to CPU" not in record.getMessage()


def quiet_libraries() -> None:
    logging.getLogger("DeepSpeed").addFilter(_not_accelerator_probe)
    hf_logging.disable_progress_bar()  # save_pretrained's shard bar; Trainer's own bar uses tqdm directly
    quiet_cpu_pin_memory()
