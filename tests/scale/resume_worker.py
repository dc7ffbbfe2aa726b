"""Child process of the kill-and-resume test: trains tiny RoBERTa with TurboTrainer, checkpoints every
2 steps, and appends every step's loss to LOSSES (one JSON line, flushed) as it goes.

    python -m tests.scale.resume_worker OUT_DIR LOSSES [resume] [slow-save-at-step N] [pace-after-step N]

`pace-after-step N`: every step after step N starts PACE_S late (a sleep; the numbers are the same), so a
test that kills the process once step N is logged hits the run while it still trains: a tiny step takes
milliseconds on a fast CPU, and the run could otherwise end (and save its last checkpoint) before the kill lands.
"""

from __future__ import annotations

import json
import os
import sys
import time

from transformers import TrainerCallback

from tests.tiny_models import make
from tests.trainer_helpers import COMMON, dataset
from turbotrain import TurboTrainer, TurboTrainingArguments

STEPS, SAVE_EVERY = 12, 2
PACE_S = 0.5


class LossFile(TrainerCallback):
    def __init__(self, path: str):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            with open(self.path, "a") as handle:
                handle.write(json.dumps({"step": state.global_step, "loss": logs["loss"]}) + "\n")
                handle.flush()
                os.fsync(handle.fileno())


class Pace(TrainerCallback):
    """Each step after `after` starts PACE_S late."""

    def __init__(self, after: int):
        self.after = after

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step >= self.after:
            time.sleep(PACE_S)


class SlowSave(TurboTrainer):
    """Stalls inside the checkpoint write of one step (after the weights, before the optimizer), so the
    test can kill the process mid-save. Announces it with a file."""

    slow_step: int | None = None

    def _save_optimizer_and_scheduler(self, output_dir):
        if self.state.global_step == self.slow_step:
            open(os.path.join(os.path.dirname(output_dir), "saving-now"), "w").close()
            time.sleep(600)
        super()._save_optimizer_and_scheduler(output_dir)


def main() -> None:
    out_dir, losses = sys.argv[1], sys.argv[2]
    resume = "resume" in sys.argv
    if "slow-save-at-step" in sys.argv:
        SlowSave.slow_step = int(sys.argv[sys.argv.index("slow-save-at-step") + 1])
    args = TurboTrainingArguments(
        output_dir=out_dir,
        **{**COMMON, "max_steps": STEPS, "save_strategy": "steps", "save_steps": SAVE_EVERY, "save_total_limit": 2},
    )
    trainer = SlowSave(model=make("roberta"), args=args, train_dataset=dataset(n=96))  # dropout on: RNG matters
    trainer.add_callback(LossFile(losses))
    if "pace-after-step" in sys.argv:
        trainer.add_callback(Pace(int(sys.argv[sys.argv.index("pace-after-step") + 1])))
    trainer.train(resume_from_checkpoint=True if resume else None)


if __name__ == "__main__":
    main()
