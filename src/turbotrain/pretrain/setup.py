"""Building blocks shared by the main job, `--compare` and the sweep: corpus -> tokenizer -> data,
the model from a seed, and the training arguments (TurboTrainer's, or stock Trainer's for `--compare`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerFast, RobertaForMaskedLM, Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from turbotrain.args import TurboTrainingArguments
from turbotrain.data import load_corpus, train_tokenizer
from turbotrain.data.corpus import Corpus
from turbotrain.pretrain.config import PretrainConfig
from turbotrain.pretrain.data import PretrainData, build_pretrain_data
from turbotrain.pretrain.precision import resolve_precision
from turbotrain.trainer import TurboTrainer


@dataclass
class Prepared:
    corpus: Corpus
    tokenizer: PreTrainedTokenizerFast
    data: PretrainData


def prepare(cfg: PretrainConfig) -> Prepared:
    corpus = load_corpus(cfg.files)
    tokenizer = train_tokenizer(corpus, cfg.vocab_size)
    return Prepared(
        corpus, tokenizer, build_pretrain_data(corpus, tokenizer, cfg.seq_len, cfg.batch_size, seed=cfg.seed)
    )


def initial_model(cfg: PretrainConfig, vocab_size: int) -> RobertaForMaskedLM:
    torch.manual_seed(cfg.seed)
    return RobertaForMaskedLM(cfg.roberta_config(vocab_size=vocab_size, dropout=cfg.dropout))


def training_arguments(cfg: PretrainConfig, output_dir: str, stock: bool = False) -> TrainingArguments:
    common = dict(
        output_dir=output_dir,
        per_device_train_batch_size=cfg.batch_size,
        max_steps=cfg.steps,
        learning_rate=cfg.lr,
        warmup_steps=cfg.warmup,
        lr_scheduler_type=cfg.lr_scheduler,
        weight_decay=0.01,
        adam_beta2=0.98,
        logging_steps=cfg.logging_steps,
        eval_strategy="no",
        save_strategy="no" if stock else "steps",
        save_steps=cfg.save_every,
        save_total_limit=2,
        report_to="none",
        seed=cfg.seed,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        disable_tqdm=not cfg.progress,
        **resolve_precision(cfg.bf16).trainer_arguments(),
    )
    if stock:
        return TrainingArguments(**common)
    # the job trains with dropout on padded sentences: packing them draws other dropout masks than stock's
    # padded batches (same distribution), which this job accepts for the speed (--compare measures quality)
    # a budgeted run: auto's one-time inductor measurement (compile 58 s on a 2-core EPYC) is not in the plan
    options = {"min_steps": cfg.steps + 1} if cfg.backend == "auto" and not cfg.measure_backend else None
    return TurboTrainingArguments(
        **common,
        backend=cfg.backend,
        backend_options=options,
        label_sparsity=cfg.label_sparsity,
        padding_free_with_dropout=True,
    )


def make_trainer(cfg: PretrainConfig, prepared: Prepared, output_dir: str, callbacks: list, stock: bool = False):
    """The job's trainer: Trainer's own bar and log printer taken off (the job draws its bar, progress.py; the
    speed probe prints nothing)."""
    model = initial_model(cfg, len(prepared.tokenizer))
    trainer_class = Trainer if stock else TurboTrainer
    trainer = trainer_class(
        model=model,
        args=training_arguments(cfg, output_dir, stock),
        train_dataset=prepared.data.train,
        data_collator=prepared.data.collator,
        processing_class=prepared.tokenizer,
        callbacks=callbacks,
    )
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    return trainer
