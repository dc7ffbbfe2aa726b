"""The main job, `turbotrain pretrain`: job.py runs it; config, data, metrics, callbacks, probes, guard,
compare, plot and summary are its parts (one job each); shape is the RoBERTa layout it trains (the
benchmark trains the same one)."""

from turbotrain.pretrain.config import PretrainConfig
from turbotrain.pretrain.job import PretrainResult, TrainingStopped, run_pretrain

__all__ = ["PretrainConfig", "PretrainResult", "TrainingStopped", "run_pretrain"]
