"""`PretrainConfig`: the main job's options, checked up front (one clear line per bad value).

Defaults were chosen by measurement on 2-core CPUs. benchmarks/2026-12-01-cpu-pretrain-sweep.md: at a 75 s
budget, RoBERTa h128 x 2 layers (0.10 s/step) left the unigram plateau while h256 x 4 (0.47 s/step) stayed on
it. benchmarks/2026-12-02-cpu-pretrain-sweep.md (Xeon with AMX-BF16): at a 480 s budget h128 x 2 in fp32
(7,594 steps) reached held-out top-1 28.4% with context-dependent fill-mask guesses, h256 x 4 in bf16 (2,678
steps) 18.2%; 4,000 steps of h128 x 2 gave 15.9%, "the" for 8 of the 10 fill-mask lines. So: h128 x 2,
8,000 steps of 32 natural-length paragraphs (~18 epochs of the built-in corpus, ~8 minutes there), fp32:
bf16 autocast made this small model's steps slower (0.098 vs 0.063 s/step; h256 x 4 ran 1.15x faster in bf16).

That fixed count took ~24 minutes on a 2-core Zen 3 EPYC, so the default is now a time budget (`minutes`,
budget.py): `max_steps=None` sizes steps, warm-up and intervals to the budget and picks the model from the
menu (when the shape is the default one: `choose_model=None` means "unless hidden/layers/heads were set");
`max_steps=N` trains exactly N steps of the given shape. `learning_rate=None`: the chosen model's (2e-3
for h128 x 2); `eval_steps`/`save_steps=None`: every 1/8 of the steps (1,000 of 8,000).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from turbotrain.pretrain.budget import intervals
from turbotrain.pretrain.shape import ModelShape

BF16_CHOICES = ("on", "off", "auto")  # precision.py: auto = bf16 autocast on AMX-BF16 CPUs / bf16 CUDA
# the backends' registry (backends.valid_choices()) as data, so the CLI parses without importing torch; a test
# checks they agree
BACKEND_CHOICES = ("auto", "eager", "inductor", "onnxruntime", "xla")
DEFAULT_SHAPE = (128, 2, 2)  # hidden, layers, heads: the menu's smallest (budget.py)
DEFAULT_LEARNING_RATE = 2e-3
MIN_SEQ_LEN = 16  # shorter cannot hold a sentence with a masked word (the fill-mask examples need ~12-40)


@dataclass
class PretrainConfig(ModelShape):
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 2
    batch_size: int = 32
    output_dir: str = "out/pretrain"
    files: list[str] = field(default_factory=list)
    max_steps: int | None = None  # None: as many as fit `minutes` (budget.py)
    minutes: float = 10.0
    learning_rate: float | None = None  # None: the model's own (2e-3 for h128 x 2)
    warmup_steps: int | None = None  # None: 5% of max_steps
    lr_scheduler: str = "linear"
    dropout: float = 0.1
    bf16: str = "off"  # on, off, auto (precision.py); fp32 is faster for the default h128 x 2
    logging_steps: int = 100
    eval_steps: int | None = None  # None: every 1/8 of max_steps
    save_steps: int | None = None  # None: every 1/8 of max_steps
    threads: int | None = None  # None: usable cores less busy ones (threads.py)
    choose_model: bool | None = None  # None: from the menu unless the shape differs from the default
    backend: str = "auto"
    measure_backend: bool = True  # False: `auto` uses a cached choice or eager, never its one-time measurement
    label_sparsity: bool = True
    progress: bool = True
    export_onnx: bool = False
    resume: bool = False
    overwrite: bool = False  # train into a folder holding an earlier run (guard.py)
    compare: bool = False
    plot: bool = True

    def __post_init__(self):
        if self.choose_model is None:
            self.choose_model = (self.hidden_size, self.num_layers, self.num_heads) == DEFAULT_SHAPE
        check_config(self)

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else intervals(self.steps)[0]

    @property
    def steps(self) -> int:
        if self.max_steps is None:
            raise ValueError("the steps are not planned yet (max_steps=None: run_pretrain sizes them to the budget)")
        return self.max_steps

    @property
    def evaluate_every(self) -> int:
        return self.eval_steps if self.eval_steps is not None else intervals(self.steps)[1]

    @property
    def save_every(self) -> int:
        return self.save_steps if self.save_steps is not None else intervals(self.steps)[2]

    @property
    def lr(self) -> float:
        return self.learning_rate if self.learning_rate is not None else DEFAULT_LEARNING_RATE


def _positive(name: str, value, flag: str) -> None:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{flag} must be a positive whole number, got {value}")


def check_config(cfg: PretrainConfig) -> None:
    """Raise ValueError naming the flag and the fix for the first bad option."""
    for name, flag in (
        ("max_steps", "--steps"),
        ("num_heads", "--heads"),
        ("hidden_size", "--hidden-size"),
        ("num_layers", "--layers"),
        ("batch_size", "--batch-size"),
        ("logging_steps", "--logging-steps"),
        ("eval_steps", "--eval-steps"),
        ("save_steps", "--save-steps"),
    ):
        value = getattr(cfg, name)
        if value is not None or name not in ("max_steps", "eval_steps", "save_steps"):
            _positive(name, value, flag)
    if not (isinstance(cfg.minutes, (int, float)) and math.isfinite(cfg.minutes) and cfg.minutes > 0):
        raise ValueError(f"--minutes must be a number above 0, got {cfg.minutes}")
    if cfg.threads is not None:
        _positive("threads", cfg.threads, "--threads")
    if cfg.seq_len < MIN_SEQ_LEN:
        raise ValueError(f"--seq-len must be at least {MIN_SEQ_LEN} tokens, got {cfg.seq_len}")
    if cfg.hidden_size % cfg.num_heads:
        raise ValueError(f"--hidden-size ({cfg.hidden_size}) must be a multiple of --heads ({cfg.num_heads})")
    if cfg.vocab_size < 300:
        raise ValueError(f"--vocab-size must be at least 300 (256 bytes + special tokens), got {cfg.vocab_size}")
    if cfg.learning_rate is not None and not (math.isfinite(cfg.learning_rate) and cfg.learning_rate > 0):
        raise ValueError(f"--lr must be a finite number above 0, got {cfg.learning_rate}")
    if cfg.warmup_steps is not None and cfg.warmup_steps < 0:
        raise ValueError(f"--warmup-steps must be 0 or more, got {cfg.warmup_steps}")
    if not 0 <= cfg.dropout < 1:
        raise ValueError(f"--dropout must be in [0, 1), got {cfg.dropout}")
    if cfg.lr_scheduler not in ("linear", "cosine", "constant_with_warmup"):
        raise ValueError(f"--lr-scheduler must be linear, cosine or constant_with_warmup, got {cfg.lr_scheduler}")
    if cfg.bf16 not in BF16_CHOICES:
        raise ValueError(f"--bf16 must be on, off or auto, got {cfg.bf16}")
    if cfg.backend not in BACKEND_CHOICES:
        raise ValueError(f"--backend must be one of {', '.join(BACKEND_CHOICES)}, got {cfg.backend}")
    if cfg.resume and cfg.overwrite:
        raise ValueError("--resume continues the run in --output-dir, --overwrite replaces it: give one of them")
