"""sentence-transformers' own trainer, stock and unmodified under `turbotrain run`: the same losses, and the line
turbotrain printed (what it changed, what it left alone and why).

    python scripts/sentence_transformers_check.py --work /tmp/st-check [--steps 80] [--loss mnrl cosine]

sentence-transformers is not in any extra (it brings scikit-learn and SciPy): install it beside the dev extra to run
this. Each run is a child process training a SentenceTransformer (a random 2-layer BERT from a config, a WordPiece
tokenizer trained here, mean pooling) on made-up sentence pairs, fp32, 16 pairs a batch; `mnrl`:
MultipleNegativesRankingLoss on (anchor, positive), `cosine`: CosineSimilarityLoss on scored pairs. Pass: every
logged loss within --tolerance (relative) of stock's. No network: nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
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


def train(base: Path, out: Path, loss_name: str, steps: int) -> None:
    """One training run in this process; prints the logged losses as one JSON line."""
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
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=16,
        learning_rate=1e-4,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
        use_cpu=True,
        dataloader_num_workers=0,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
    trainer.train()
    runtime = next(e["train_runtime"] for e in trainer.state.log_history if "train_runtime" in e)
    print(
        "RESULT " + json.dumps({"losses": [e["loss"] for e in trainer.state.log_history if "loss" in e], "s": runtime})
    )


def run_child(way: str, work: Path, loss_name: str, steps: int) -> dict:
    launch = [sys.executable, "-m", "turbotrain"] if way == "turbotrain run" else [sys.executable]
    out = work / f"{loss_name}-{way.replace(' ', '-')}"
    cmd = [*launch, __file__, "--child", loss_name, "--work", str(work), "--steps", str(steps), "--out", str(out)]
    start = time.perf_counter()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TURBOTRAIN_CACHE": str(work / "turbotrain-cache")}  # no earlier choice
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    log = done.stdout + done.stderr
    (work / f"{out.name}.log").write_text(" ".join(cmd) + "\n" + log)
    result = next((json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT ")), None)
    if done.returncode != 0 or result is None:
        raise SystemExit(f"{way} ({loss_name}) failed, rc {done.returncode}:\n{log[-3000:]}")
    said = [line.split("made 1 Trainer: ", 1)[1] for line in log.splitlines() if "made 1 Trainer: " in line]
    return {**result, "wall": time.perf_counter() - start, "said": said[-1] if said else ""}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/turbotrain-st-check"))
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--loss", nargs="+", default=["mnrl", "cosine"], choices=["mnrl", "cosine"])
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--child", choices=["mnrl", "cosine"], help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    base = args.work / "base"
    if args.child:
        train(base, args.out, args.child, args.steps)
        return 0
    build_base(base)
    failed = False
    print("| loss | max rel. loss diff | train s stock / turbotrain run | status | turbotrain said |")
    print("|---|---|---|---|---|")
    for loss_name in args.loss:
        stock, turbo = (run_child(way, args.work, loss_name, args.steps) for way in ("stock", "turbotrain run"))
        diff = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(stock["losses"], turbo["losses"], strict=True))
        ok = diff <= args.tolerance and len(stock["losses"]) == args.steps
        failed |= not ok
        row = f"| {loss_name} | {diff:.1e} | {stock['s']:.2f} / {turbo['s']:.2f} | {'ok' if ok else 'LOSS DIFFERS'} |"
        print(f"{row} {turbo['said']} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
