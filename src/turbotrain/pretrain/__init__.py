"""The main job, `turbotrain pretrain`: job.py runs it; config, data, metrics, callbacks, probes, guard,
compare, plot and summary are its parts (one job each); shape is the RoBERTa layout it trains (the
benchmark trains the same one).

Names are imported on first use: `turbotrain pretrain --help` reads `config.PretrainConfig` (no torch, no
Transformers) without importing the job."""

from __future__ import annotations

from turbotrain.utils.lazy_names import lazy_names

_LAZY = {
    "PretrainConfig": "turbotrain.pretrain.config",
    "PretrainResult": "turbotrain.pretrain.job",
    "TrainingStopped": "turbotrain.pretrain.job",
    "run_pretrain": "turbotrain.pretrain.job",
}
__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
