"""The main job's progress bar, in place of Trainer's (setup.py takes Trainer's own bar and log printer off).

* Drawn from the first step on, not when training begins: what is said then (the trainer's one summary
  line, `auto`'s plan) comes before it, each on its own line.
* While it is drawn, log records (turbotrain's, Transformers', torch's, the root logger's) are written above it
  through tqdm (`logging_redirect_tqdm`), never into it.
* Its rate is the mean over the part of the run drawn so far (tqdm `smoothing=0`): the held-out evaluations
  and checkpoint saves are in it, as they are in the time left (one every 1/8 of the run), so the ETA does not
  jump at each of them as an average of the last few steps does.
* Trainer's loss logs are one line each (`step 100: loss 6.843, grad norm 1.49, lr 0.00179`); its end-of-training
  dict (`train_runtime`, ...) is not shown: the job prints its own summary.
* It ends at 100%, or says why it stopped before (`369 of 372 planned: budget reached`; `stopped_by` answers).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm
from transformers import TrainerCallback

# the loggers that print while training: their console handlers write through the bar while it is drawn
LOGGERS = ("", "turbotrain", "transformers", "torch", "torch._dynamo", "torch._inductor")
SHOWN = (("loss", "loss", ".4g"), ("grad_norm", "grad norm", ".3g"), ("learning_rate", "lr", ".3g"))


def log_line(step: int, logs: dict) -> str | None:
    """One of Trainer's logs as a line, or None for its end-of-training figures (the job says its own)."""
    if "train_runtime" in logs:
        return None
    parts = [f"{label} {logs[key]:{spec}}" for key, label, spec in SHOWN if isinstance(logs.get(key), (int, float))]
    known = {key for key, _, _ in SHOWN} | {"epoch", "total_flos"}
    parts += [f"{key} {value}" for key, value in logs.items() if key not in known]
    return f"step {step}: " + ", ".join(parts)


class JobProgress(TrainerCallback):
    """The bar of one `train()`; `stopped_by()` names what stopped a run before its last step (or None)."""

    def __init__(self, stopped_by: Callable[[], str | None] = lambda: None, label: str = ""):
        self.stopped_by, self.label = stopped_by, label
        self.bar = None
        self._redirect = contextlib.ExitStack()

    def on_step_begin(self, args, state, control, **kwargs):
        if self.bar is None and state.is_world_process_zero:
            self.bar = tqdm(
                total=state.max_steps,
                initial=state.global_step,  # a resumed run starts where its checkpoint is
                desc=self.label or None,
                unit="step",
                smoothing=0,
                dynamic_ncols=True,
            )
            self._redirect.enter_context(logging_redirect_tqdm([logging.getLogger(name) for name in LOGGERS]))

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        line = log_line(state.global_step, logs or {}) if state.is_world_process_zero else None
        if line is not None:
            tqdm.write(line)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None and state.global_step < state.max_steps:
            why = self.stopped_by() or "stopped"
            self.bar.set_postfix_str(f"{state.global_step:,} of {state.max_steps:,} planned: {why}", refresh=False)
        self.close()

    def close(self) -> None:
        """Take the bar down and give the loggers their handlers back (also after an error in training)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self._redirect.close()
