"""The run's summary line (training/run_summary.py) in the trackers Trainer reports to, as run config.

For each of Trainer's tracker callbacks present (`report_to`), through the tracker's public API, once per
`train()` on the first process, after the tracker's own `on_train_begin` has set its run up:

* TensorBoard (`TensorBoardCallback`): a text entry `turbotrain` beside Trainer's `args` and
  `model_config` entries (`tb_writer.add_text`);
* Weights & Biases (`WandbCallback`): the run config key `turbotrain` (`wandb.run.config.update`);
* MLflow (`MLflowCallback`): the run parameter `turbotrain` (`mlflow.log_param`).

Other trackers get nothing (their callbacks have no public place for it). turbotrain's options
themselves are fields of the arguments, so every tracker already records them with `args.to_dict()`;
this adds what ran (the backend chosen, the passes applied and refused). A tracker that fails here is
said in one INFO line and training goes on.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("turbotrain")
KEY = "turbotrain"


def _tensorboard(callback, line: str) -> None:
    if callback.tb_writer is not None:
        callback.tb_writer.add_text(KEY, line)


def _wandb(callback, line: str) -> None:
    import wandb

    if wandb.run is not None:
        wandb.run.config.update({KEY: line}, allow_val_change=True)


def _mlflow(callback, line: str) -> None:
    import mlflow

    if mlflow.active_run() is not None:
        mlflow.log_param(KEY, line)


def writers() -> dict[type, object]:
    """Tracker callback class -> how the summary is written to its run."""
    from transformers.integrations import MLflowCallback, TensorBoardCallback, WandbCallback

    return {TensorBoardCallback: _tensorboard, WandbCallback: _wandb, MLflowCallback: _mlflow}


def report_summary(trainer, line: str) -> list[str]:
    """Write `line` to every tracker of `trainer` that can take it; the names of those written to."""
    written = []
    for callback in trainer.callback_handler.callbacks:
        for tracker_class, write in writers().items():
            if not isinstance(callback, tracker_class):
                continue
            try:
                write(callback, line)
                written.append(tracker_class.__name__)
            except Exception as error:  # a tracker's own trouble must not stop training
                logger.info("turbotrain: the summary was not sent to %s: %s", tracker_class.__name__, error)
    return written
