"""The main job's bar (progress.py), the time it keeps across a resume (callbacks.JobClock), the tied-weights
warning it drops on resume (quiet.py) and the line on the unigram plateau (summary.py), on hand-made states."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

from transformers import RobertaConfig, RobertaForMaskedLM, TrainerControl, TrainerState

from turbotrain.pretrain.callbacks import JobClock
from turbotrain.pretrain.metrics import HeldOut
from turbotrain.pretrain.progress import LOGGERS, JobProgress, log_line
from turbotrain.pretrain.quiet import MISSING_KEYS, only_tied, quiet_tied_missing_keys, tied_groups
from turbotrain.pretrain.summary import plateau_line


def _run_bar(steps_done: int, planned: int, stopped_by=lambda: None) -> JobProgress:
    bar, control = JobProgress(stopped_by), TrainerControl()
    state = TrainerState(global_step=0, max_steps=planned)
    bar.on_train_begin(None, state, control)
    assert bar.bar is None  # what is said when training begins comes before the bar
    for step in range(1, steps_done + 1):
        bar.on_step_begin(None, state, control)
        state.global_step = step
        bar.on_step_end(None, state, control)
    bar.on_train_end(None, state, control)
    return bar


def test_the_bar_ends_at_100_percent(capsys):
    bar = _run_bar(6, 6)
    assert bar.bar is None and "100%" in capsys.readouterr().err.split("\r")[-1]


def test_a_run_stopped_early_says_why_on_its_bar(capsys):
    _run_bar(369, 372, lambda: "budget reached")
    last = capsys.readouterr().err.split("\r")[-1]
    assert "369/372" in last and "369 of 372 planned: budget reached" in last


def test_logs_go_above_the_bar_and_loggers_get_their_handlers_back(capsys):
    before = {name: list(logging.getLogger(name).handlers) for name in LOGGERS}
    bar, state = JobProgress(), TrainerState(global_step=0, max_steps=4, is_world_process_zero=True)
    bar.on_step_begin(None, state, TrainerControl())
    logging.getLogger("turbotrain").warning("turbotrain auto: eager chosen")
    bar.close()
    segments = capsys.readouterr().err.replace("\r", "\n").split("\n")
    assert "turbotrain auto: eager chosen" in segments  # a line of its own, not after a bar
    assert {name: list(logging.getLogger(name).handlers) for name in LOGGERS} == before


def test_loss_logs_are_one_line_and_the_end_of_training_dict_is_not_shown():
    logs = {"loss": 6.8431, "grad_norm": 1.4912, "learning_rate": 0.0017891, "epoch": 0.005}
    assert log_line(100, logs) == "step 100: loss 6.843, grad norm 1.49, lr 0.00179"
    assert log_line(372, {"train_runtime": 44.5, "train_loss": 6.8, "epoch": 0.01}) is None


def test_the_job_time_is_kept_in_the_checkpoint_and_read_back_on_resume(tmp_path):
    clock = JobClock(started=100.0, clock=lambda: 130.5)
    saved = {"stateful_callbacks": {"JobClock": clock.state()}}  # as Trainer writes trainer_state.json
    (tmp_path / "trainer_state.json").write_text(json.dumps(saved))
    resumed = JobClock(started=500.0, resumed_from=str(tmp_path), clock=lambda: 506.0)
    assert resumed.before == 30.5 and resumed.seconds() == 36.5
    assert JobClock.seconds_at(tmp_path / "missing") == 0.0  # a checkpoint of stock Trainer: nothing kept


def _tiny_roberta() -> RobertaForMaskedLM:
    return RobertaForMaskedLM(RobertaConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2))


def test_missing_keys_are_not_said_when_they_are_tied_weights(caplog):
    model = _tiny_roberta()
    groups = tied_groups(model)
    assert {"lm_head.decoder.weight", "roberta.embeddings.word_embeddings.weight"} in groups
    assert only_tied({"lm_head.decoder.weight", "lm_head.decoder.bias"}, groups)
    assert not only_tied({"lm_head.decoder.weight", "roberta.embeddings.word_embeddings.weight"}, groups)
    assert not only_tied({"lm_head.dense.weight"}, groups)
    logger = logging.getLogger("transformers.trainer")
    with caplog.at_level(logging.WARNING, logger="transformers.trainer"), quiet_tied_missing_keys(model):
        logger.warning(MISSING_KEYS + "['lm_head.decoder.weight', 'lm_head.decoder.bias'].")
        logger.warning(MISSING_KEYS + "['lm_head.dense.weight'].")
    assert [r.getMessage() for r in caplog.records] == [MISSING_KEYS + "['lm_head.dense.weight']."]


def _result(top1: float, steps: int = 120) -> SimpleNamespace:
    return SimpleNamespace(
        held_out=HeldOut(6.0, top1, 0.1),
        unigram_top1=0.028,
        steps=steps,
        part_steps=steps,
        train_seconds=12.0,
        wall_seconds=40.0,
        resumed_seconds=0.0,
    )


def test_a_run_on_the_unigram_plateau_says_so_with_the_budget_that_did_better():
    line = plateau_line(_result(0.03))
    # 4,466 steps at 0.1 s/step sized as the budget sizes them (80% of the speed), plus 28 s outside training
    assert "word frequencies only" in line and "--minutes 10" in line and "16.9%" in line
    assert plateau_line(_result(0.09)) is None  # 3.2x the unigram's: left the plateau
