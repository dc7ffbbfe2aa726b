"""The ready names a stock script swaps to by a pure rename: `TurboSeq2SeqTrainer`,
`TurboSeq2SeqTrainingArguments`, `TurboSFTTrainer`, `TurboSFTConfig`, `TurboDPOTrainer`, `TurboDPOConfig`,
`TurboKTOTrainer`, `TurboKTOConfig`, `TurboGRPOTrainer`, `TurboGRPOConfig`, `TurboRLOOTrainer`, `TurboRLOOConfig`
(lazy; TRL's only with the llm extra)."""

from __future__ import annotations

import importlib
import pickle
import sys

import pytest
import torch
from transformers import HfArgumentParser, Seq2SeqTrainer, Seq2SeqTrainingArguments

import turbotrain
from tests.tiny_seq2seq import VOCAB, make
from tests.trainer_helpers import COMMON, assert_losses_close, train_losses
from turbotrain import turbo, turbo_arguments


def text_pairs(n: int = 40, seed: int = 0) -> list[dict]:
    """Source rows of 5..30 tokens, targets of 2..12 (a summarization-shaped length spread), unpadded."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        source, target = (int(torch.randint(lo, hi, (1,), generator=generator)) for lo, hi in ((5, 31), (2, 13)))
        rows.append(
            {
                "input_ids": torch.randint(4, VOCAB, (source,), generator=generator).tolist(),
                "labels": torch.randint(4, VOCAB, (target,), generator=generator).tolist(),
            }
        )
    return rows


def pad_pairs(rows: list[dict]) -> dict:
    """Right-pad sources with 1 (attention mask 0) and labels with -100, as DataCollatorForSeq2Seq does."""
    width, labels_width = (max(len(r[key]) for r in rows) for key in ("input_ids", "labels"))
    return {
        "input_ids": torch.tensor([r["input_ids"] + [1] * (width - len(r["input_ids"])) for r in rows]),
        "attention_mask": torch.tensor([[1] * len(r["input_ids"]) + [0] * (width - len(r["input_ids"])) for r in rows]),
        "labels": torch.tensor([r["labels"] + [-100] * (labels_width - len(r["labels"])) for r in rows]),
    }


def test_seq2seq_names_are_the_turbo_classes_and_pickle():
    assert turbotrain.TurboSeq2SeqTrainer is turbo(Seq2SeqTrainer)
    assert turbotrain.TurboSeq2SeqTrainingArguments is turbo_arguments(Seq2SeqTrainingArguments)
    args = turbotrain.TurboSeq2SeqTrainingArguments(output_dir="out", predict_with_generate=True, backend="eager")
    again = pickle.loads(pickle.dumps(args))  # Trainer saves training_args.bin with torch.save (pickle)
    assert type(again) is turbotrain.TurboSeq2SeqTrainingArguments and again.predict_with_generate


def test_seq2seq_arguments_parse_from_the_command_line_like_a_script():
    (args,) = HfArgumentParser(turbotrain.TurboSeq2SeqTrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", "out", "--predict_with_generate", "--generation_max_length", "16", "--label_sparsity", "False"]
    )
    assert args.predict_with_generate and args.generation_max_length == 16 and args.label_sparsity is False


def test_seq2seq_names_train_the_stock_losses(tmp_path):
    # dropout off: padding-free packs the padded sources, and dropout then draws other masks (README)
    data, collator = text_pairs(), pad_pairs
    stock_args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "stock"), **COMMON)
    stock = Seq2SeqTrainer(
        model=make("bart", dropout=False), args=stock_args, train_dataset=data, data_collator=collator
    )
    fast_args = turbotrain.TurboSeq2SeqTrainingArguments(output_dir=str(tmp_path / "turbo"), backend="eager", **COMMON)
    fast = turbotrain.TurboSeq2SeqTrainer(
        model=make("bart", dropout=False), args=fast_args, train_dataset=data, data_collator=collator
    )
    assert_losses_close(train_losses(fast), train_losses(stock), rtol=1e-5)


@pytest.mark.requires_llm
def test_dpo_kto_grpo_and_rloo_names_are_the_turbo_classes():
    from trl import DPOConfig, DPOTrainer, GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    assert turbotrain.TurboDPOTrainer is turbo(DPOTrainer) and turbotrain.TurboDPOConfig is turbo_arguments(DPOConfig)
    assert turbotrain.TurboGRPOTrainer is turbo(GRPOTrainer)
    assert turbotrain.TurboGRPOConfig is turbo_arguments(GRPOConfig)
    assert turbotrain.TurboRLOOTrainer is turbo(RLOOTrainer)
    assert turbotrain.TurboRLOOConfig is turbo_arguments(RLOOConfig)
    from trl import KTOConfig, KTOTrainer

    assert turbotrain.TurboKTOTrainer is turbo(KTOTrainer) and turbotrain.TurboKTOConfig is turbo_arguments(KTOConfig)
    args = turbotrain.TurboDPOConfig(output_dir="out", beta=0.2, backend="eager", bf16=False)  # TRL: bf16 default
    again = pickle.loads(pickle.dumps(args))
    assert type(again) is turbotrain.TurboDPOConfig and (again.beta, again.backend) == (0.2, "eager")


@pytest.mark.requires_llm
def test_sft_names_are_the_turbo_classes():
    from trl import SFTConfig, SFTTrainer

    assert turbotrain.TurboSFTTrainer is turbo(SFTTrainer)
    assert turbotrain.TurboSFTConfig is turbo_arguments(SFTConfig)


def test_sft_names_without_trl_raise_an_import_error_naming_the_extra(monkeypatch):
    import turbotrain.utils.imports as imports

    monkeypatch.setattr(imports, "is_available", lambda package: package != "trl")
    monkeypatch.delitem(sys.modules, "turbotrain.integrations.trl.ready", raising=False)
    monkeypatch.delitem(turbotrain.__dict__, "TurboSFTTrainer", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'turbotrain\[llm\]'"):
        importlib.import_module("turbotrain.integrations.trl.ready")
    with pytest.raises(ImportError, match=r"turbotrain\[llm\]"):
        turbotrain.TurboSFTTrainer  # noqa: B018
