"""turbotrain's own callbacks kept out of the callback list users see.

A Trainer's callbacks are public: `trainer.callback_handler.callbacks`, `pop_callback`, `remove_callback`,
`callback_list` and any code that lists them (a test counting them, a tracker looking for its own) must see
exactly the stock Trainer's list. turbotrain drives callbacks of its own (the `auto` backend's step
timer, `backends/auto.py`; the summary line, `training/run_summary.py`; `ThreadsCallback` below), so `HiddenCallbacks` is Trainer's
`CallbackHandler` with a second list, `hidden`, beside the public `callbacks`:

* every event goes first to the public callbacks (in their order, as stock), then to the hidden ones, with the
  `control` the public ones returned: the hidden callbacks run where they used to run when they were appended
  last, so `SummaryCallback` still speaks after every tracker has set itself up;
* adding, popping, removing and listing callbacks touch the public list only; the hidden ones are not
  `ExportableState`, so checkpoints' `stateful_callbacks` are stock's too.

`ThreadsCallback`: a CPU run's torch threads kept as the main job keeps its own (utils/threads.py's
`ThreadKeeper`): chosen when training begins (before the summary line, which names the choice), looked at again
every few seconds of training (two small /proc reads), put back when training ends. Beside CPU-bound processes a
thread that shares a core with one stalls torch's whole pool at every parallel region; one thread fewer per busy
core does not. `OMP_NUM_THREADS` / `MKL_NUM_THREADS` set by the user: nothing changes.
"""

from __future__ import annotations

import copy
import logging

from transformers.trainer_callback import CallbackHandler, TrainerCallback

from turbotrain.utils.threads import OtherWork, ThreadChoice, ThreadKeeper

logger = logging.getLogger("turbotrain")


class HiddenCallbacks(CallbackHandler):
    """Trainer's callback handler plus `hidden` callbacks, called after the public ones and never listed."""

    hidden: list

    @classmethod
    def around(cls, handler: CallbackHandler, hidden: list) -> HiddenCallbacks:
        """`handler` (the one Trainer built: its callbacks, model, optimizer...) with `hidden` callbacks added."""
        made = cls.__new__(cls)
        made.__dict__.update(handler.__dict__)
        made.hidden = list(hidden)
        return made

    def call_event(self, event, args, state, control, **kwargs):
        control = super().call_event(event, args, state, control, **kwargs)
        hidden = copy.copy(self)  # the same model, optimizer, dataloaders; the public list stays as it is, since a
        hidden.callbacks = self.hidden  # hidden callback may read it (the summary looks for the trackers)
        return CallbackHandler.call_event(hidden, event, args, state, control, **kwargs)


class ThreadsCallback(TrainerCallback):
    """Keeps a CPU run's thread count (module docstring); `choice` is what the run began with (None off a CPU)."""

    def __init__(self, on_cpu: bool, work: OtherWork | None = None):
        import torch

        self.keeper = ThreadKeeper(torch.get_num_threads, torch.set_num_threads, work) if on_cpu else None
        self.choice: ThreadChoice | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.keeper is not None:
            self.choice = self.keeper.begin()

    def on_step_end(self, args, state, control, **kwargs):
        changed = self.keeper.step() if self.keeper is not None else None
        if changed is not None:
            logger.info("turbotrain: %s (the load changed)", changed.line())

    def on_train_end(self, args, state, control, **kwargs):
        if self.keeper is not None:
            self.keeper.end()
