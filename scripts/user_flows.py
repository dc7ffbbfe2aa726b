"""Flows users run that no upstream test file covers, stock and with turbotrain: the same losses, and the line
turbotrain printed (what it changed, what it left alone and why).

    python scripts/user_flows.py --work /tmp/user-flows [--flows st-mnrl st-cosine peft-lora peft-lora-bf16]

* `st-mnrl`, `st-cosine`: sentence-transformers' own trainer, unmodified, stock and under `turbotrain run` (its
  `SentenceTransformerTrainer` is built on turbotrain's Trainer there): a random 2-layer BERT from a config, a WordPiece
  tokenizer trained here, mean pooling, made-up sentence pairs, 16 a batch, fp32; MultipleNegativesRankingLoss on
  (anchor, positive) or CosineSimilarityLoss on scored pairs. sentence-transformers is in no extra (it brings
  scikit-learn and SciPy): install it beside the dev extra to run these.
* `peft-lora`, `peft-lora-bf16`: a PEFT LoRA notebook's flow with the two names swapped (`TurboTrainer`,
  `TurboTrainingArguments`): a word-level tokenizer trained here, `Dataset.map` tokenizing with truncation,
  `DataCollatorForLanguageModeling(mlm=False)`, `gradient_checkpointing_enable()` and `enable_input_require_grads()`,
  `get_peft_model` with LoRA r=16 on every projection; Llama-3.2-1B's published config (bench/shapes.py: hidden
  2048, 32 heads, 8 KV heads, llama3 RoPE scaling, tied) at 2 layers, batch 4 of 5-120 words; fp32 or bf16
  autocast (`use_cpu`).

Each run is a child process with a turbotrain cache of its own under `--work`. Pass: every logged loss within
`--tolerance` (relative; bf16 flows 2e-2) of stock's. No network: nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

VOCAB_WORDS, SENTENCES, PAIRS = 300, 400, 160


def build_base(folder: Path) -> None:
    """A random BERT and its tokenizer saved where `models.Transformer` loads them from (no hub)."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(sentences(), vocab_size=400, min_frequency=1)
    wordpiece.save_model(str(folder))
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    tokenizer.save_pretrained(folder)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    BertModel(config).save_pretrained(folder)


def sentences() -> list[str]:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(VOCAB_WORDS)]
    return [" ".join(rng.choices(words, k=rng.randint(4, 40))) for _ in range(SENTENCES)]


def train_sentence_transformer(base: Path, out: Path, loss_name: str, steps: int) -> dict:
    """sentence-transformers' trainer as its docs show it (the way `turbotrain run` sees it: unmodified)."""
    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )
    from sentence_transformers.models import Pooling, Transformer

    torch.manual_seed(0)
    model = SentenceTransformer(modules=[Transformer(str(base), max_seq_length=64), Pooling(128, "mean")])
    lines = sentences()
    first, second = lines[0 : 2 * PAIRS : 2], lines[1 : 2 * PAIRS : 2]
    if loss_name == "mnrl":
        data = Dataset.from_dict({"anchor": first, "positive": second})
        loss = losses.MultipleNegativesRankingLoss(model)
    else:
        scores = [random.Random(i).random() for i in range(PAIRS)]
        data = Dataset.from_dict({"sentence1": first, "sentence2": second, "score": scores})
        loss = losses.CosineSimilarityLoss(model)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=16, learning_rate=1e-4, **QUIET
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
    trainer.train()
    return history(trainer)


def train_peft_notebook(out: Path, turbo: bool, bf16: bool, steps: int) -> dict:
    """A PEFT LoRA notebook's cells, with `Trainer`/`TrainingArguments` swapped for turbotrain's when `turbo`."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import DataCollatorForLanguageModeling, LlamaForCausalLM, PreTrainedTokenizerFast

    from turbotrain.bench.shapes import shape_config

    if turbo:
        from turbotrain import TurboTrainer as Trainer
        from turbotrain import TurboTrainingArguments as TrainingArguments
    else:
        from transformers import Trainer, TrainingArguments
    torch.manual_seed(0)
    rng = random.Random(0)
    words = [f"w{i}" for i in range(500)]
    lines = [" ".join(rng.choices(words, k=rng.randint(5, 120))) for _ in range(200)]
    word_level = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    special = ["[BOS]", "[PAD]", "[EOS]", "[UNK]"]  # the ids bench/shapes.py gives every published shape
    word_level.train_from_iterator(lines, trainers.WordLevelTrainer(special_tokens=special))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, **dict(zip(SPECIAL_NAMES, special, strict=True)))
    layers = {"num_hidden_layers": 2, "vocab_size": len(tokenizer)}  # Llama-3.2-1B's published config at 2 layers
    config = shape_config("llama3.2-1b", seq_len=512, overrides=layers, untied=False, dropout=0.0)
    model = LlamaForCausalLM(config)
    model.config.use_cache = False
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    projections = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=projections, task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    data = Dataset.from_dict({"text": lines}).map(
        lambda rows: tokenizer(rows["text"], truncation=True, max_length=256), batched=True, remove_columns=["text"]
    )
    args = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=4, max_steps=steps, learning_rate=2e-4, bf16=bf16, **QUIET
    )
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collator)
    trainer.train()
    return history(trainer)


QUIET = dict(logging_steps=1, save_strategy="no", report_to=[], seed=0, use_cpu=True, dataloader_num_workers=0)
SPECIAL_NAMES = ("bos_token", "pad_token", "eos_token", "unk_token")


def history(trainer) -> dict:
    runtime = next(e["train_runtime"] for e in trainer.state.log_history if "train_runtime" in e)
    return {"losses": [e["loss"] for e in trainer.state.log_history if "loss" in e], "s": runtime}


@dataclass(frozen=True)
class Flow:
    steps: int
    tolerance: float | None = None  # its own (bf16), else --tolerance's
    turbo_run: bool = False  # turbo by `turbotrain run` (the script unmodified), else by the names swapped


FLOWS = {
    "st-mnrl": Flow(steps=80, turbo_run=True),
    "st-cosine": Flow(steps=80, turbo_run=True),
    "peft-lora": Flow(steps=8),
    "peft-lora-bf16": Flow(steps=8, tolerance=2e-2),
}


def child(flow: str, turbo: bool, work: Path, out: Path) -> dict:
    if flow.startswith("st-"):
        return train_sentence_transformer(work / "st-base", out, flow.removeprefix("st-"), FLOWS[flow].steps)
    return train_peft_notebook(out, turbo, flow.endswith("bf16"), FLOWS[flow].steps)


def run_child(flow: str, turbo: bool, work: Path) -> dict:
    way = "turbotrain" if turbo else "stock"
    launch = [sys.executable, "-m", "turbotrain"] if turbo and FLOWS[flow].turbo_run else [sys.executable]
    out = work / f"{flow}-{way}"
    cmd = [*launch, __file__, "--child", flow, "--work", str(work), "--out", str(out), *(["--turbo"] if turbo else [])]
    start = time.perf_counter()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TURBOTRAIN_CACHE": str(work / "turbotrain-cache")}  # no earlier choice
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    log = done.stdout + done.stderr
    (work / f"{out.name}.log").write_text(" ".join(cmd) + "\n" + log)
    result = next((json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT ")), None)
    if done.returncode != 0 or result is None:
        raise SystemExit(f"{flow} ({way}) failed, rc {done.returncode}:\n{log[-3000:]}")
    return {**result, "wall": time.perf_counter() - start, "said": said_last(log)}


def said_last(log: str) -> str:
    """turbotrain's last word on the run: `turbotrain run`'s closing line (what auto decided included), else the
    trainer's summary line."""
    lines = log.splitlines()
    closing = [line.split("made 1 Trainer: ", 1)[1] for line in lines if "made 1 Trainer: " in line]
    summary = [
        "backend " + line.split("turbotrain: backend ", 1)[1] for line in lines if "turbotrain: backend " in line
    ]
    return (closing or summary or [""])[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/turbotrain-user-flows"))
    parser.add_argument("--flows", nargs="+", default=list(FLOWS), choices=list(FLOWS))
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--child", choices=list(FLOWS), help=argparse.SUPPRESS)
    parser.add_argument("--turbo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.turbo, args.work, args.out)))
        return 0
    if any(flow.startswith("st-") for flow in args.flows):
        build_base(args.work / "st-base")
    failed = False
    print("| flow | max rel. loss diff | train s stock / turbotrain | status | turbotrain said |")
    print("|---|---|---|---|---|")
    for flow in args.flows:
        stock, turbo = (run_child(flow, turbo, args.work) for turbo in (False, True))
        diff = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(stock["losses"], turbo["losses"], strict=True))
        tolerance = FLOWS[flow].tolerance or args.tolerance
        ok = diff <= tolerance and len(stock["losses"]) == FLOWS[flow].steps
        failed |= not ok
        row = f"| {flow} | {diff:.1e} | {stock['s']:.2f} / {turbo['s']:.2f} | {'ok' if ok else 'LOSS DIFFERS'} |"
        print(f"{row} {turbo['said']} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
