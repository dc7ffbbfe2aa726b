"""Run Hugging Face's example scripts stock and with turbotrain, and compare their losses.

    python scripts/hf_examples.py --examples-dir ~/transformers/examples/pytorch [--trl-scripts-dir DIR] \
        [--launcher rename run]

`--launcher rename` (the default): the scripts with the class names swapped; `--launcher run`: the
unmodified scripts started as `python -m turbotrain script.py ...` (zero edits, docs/zero-edit.md); both:
one row per way.

Users run turbotrain through the stock example scripts with two names changed (`Trainer` ->
`TurboTrainer`, `TrainingArguments` -> `TurboTrainingArguments`; `Seq2SeqTrainer`, `SFTTrainer` and
their arguments likewise). This script does exactly that, offline: it builds a local corpus (the
built-in standard-library text), a byte-level BPE tokenizer, tiny RoBERTa / GPT-2 / BART models and the
data files each script reads, runs every script twice under this interpreter (stock, then swapped by a
pure rename of the class names in a copy), and prints one row per script: the largest relative
difference between the two runs' logged train losses (step by step, from `trainer_state.json`), the
same for the evaluation metrics both runs report, the train-time ratio (stock / swapped train_runtime;
10 steps of a tiny model: mostly fixed overheads, not turbotrain's speed-up), and a status.

Offline stand-ins: `evaluate` and `nltk` need the network (metric scripts, punkt data); where they are
not installed, a shim folder put on PYTHONPATH for both runs gives `evaluate.load` simple local metrics
with the keys the scripts read and `nltk.sent_tokenize` a plain sentence split. Both runs get the same
stand-ins, so metrics still compare; their values are not the real metrics'.

Images and audio (`media_examples`): `run_image_classification.py` on an image folder of random-pixel PNGs
(a tiny ViT), `run_audio_classification.py` and `run_speech_recognition_ctc.py` on audio folders of espeak-ng
speech (a tiny Wav2Vec2). Each is skipped, naming the module, where what it needs is not importable:
torchvision (the image script's transforms) or torchcodec (datasets 5 decodes audio with it; it needs
FFmpeg's shared libraries).

A dev tool, not a test: each script's run takes 10-60 s on a 2-core CPU (all of them: ~10 min).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

RENAMES = {
    "Trainer": "TurboTrainer",
    "TrainingArguments": "TurboTrainingArguments",
    "Seq2SeqTrainer": "TurboSeq2SeqTrainer",
    "Seq2SeqTrainingArguments": "TurboSeq2SeqTrainingArguments",
    "SFTTrainer": "TurboSFTTrainer",
    "SFTConfig": "TurboSFTConfig",
}
LAUNCHERS = {"rename": "swapped", "run": "run"}  # --launcher -> the variant it runs beside stock
WAYS = {"swapped": "names swapped", "run": "`turbotrain run`"}
COMMON = ["--max_steps", "10", "--logging_steps", "1", "--seed", "42", "--report_to", "none", "--save_steps", "10"]
COMMON += ["--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4", "--dataloader_num_workers", "0"]


@dataclass
class Example:
    name: str
    script: str  # relative to its scripts dir
    args: list[str]
    trl: bool = False
    eval: bool = True
    extra_files: list[str] = field(default_factory=list)  # siblings the script imports
    resume: bool = False  # swapped: train 10 steps saving at 5, then resume from checkpoint-5 in a new process
    requires: tuple[str, ...] = ()  # modules the script or its data loading needs beyond the dev extra
    tolerance: float | None = None  # its own largest relative loss difference (bf16 runs), else --tolerance's


def examples(w: Path) -> list[Example]:
    d, m = w / "data", w / "models"
    tok, text = ["--tokenizer_name", str(m / "tokenizer")], ["--do_train", "--do_eval"]
    return [
        Example(
            "run_mlm",
            "language-modeling/run_mlm.py",
            [
                "--config_name",
                str(m / "roberta-config"),
                *tok,
                "--train_file",
                str(d / "train.txt"),
                "--validation_file",
                str(d / "validation.txt"),
                "--max_seq_length",
                "64",
                *text,
            ],
        ),
        Example(
            "run_clm",
            "language-modeling/run_clm.py",
            [
                "--config_name",
                str(m / "gpt2-config"),
                *tok,
                "--train_file",
                str(d / "train.txt"),
                "--validation_file",
                str(d / "validation.txt"),
                "--block_size",
                "64",
                *text,
            ],
        ),
        Example(
            "run_clm (resume)",
            "language-modeling/run_clm.py",
            ["--config_name", str(m / "gpt2-config"), *tok, "--train_file", str(d / "train.txt"), "--block_size", "64"]
            + ["--do_train", "--save_steps", "5"],
            resume=True,
        ),
        Example(
            "run_glue",
            "text-classification/run_glue.py",
            [
                "--model_name_or_path",
                str(m / "roberta"),
                "--train_file",
                str(d / "cls_train.csv"),
                "--validation_file",
                str(d / "cls_validation.csv"),
                "--max_seq_length",
                "64",
                *text,
            ],
        ),
        Example(
            "run_glue (dynamic padding)",
            "text-classification/run_glue.py",
            [
                "--model_name_or_path",
                str(m / "roberta"),
                "--train_file",
                str(d / "cls_train.csv"),
                "--validation_file",
                str(d / "cls_validation.csv"),
                "--max_seq_length",
                "64",
                "--pad_to_max_length",
                "False",
                *text,
            ],
        ),
        Example(
            "run_ner",
            "token-classification/run_ner.py",
            [
                "--model_name_or_path",
                str(m / "roberta"),
                "--train_file",
                str(d / "ner_train.json"),
                "--validation_file",
                str(d / "ner_validation.json"),
                *text,
            ],
        ),
        Example(
            "run_qa",
            "question-answering/run_qa.py",
            [
                "--model_name_or_path",
                str(m / "roberta"),
                "--train_file",
                str(d / "qa_train.json"),
                "--validation_file",
                str(d / "qa_validation.json"),
                "--max_seq_length",
                "96",
                "--doc_stride",
                "32",
                *text,
            ],
            extra_files=["trainer_qa.py", "utils_qa.py"],
        ),
        Example(
            "run_summarization",
            "summarization/run_summarization.py",
            [
                "--model_name_or_path",
                str(m / "bart"),
                "--train_file",
                str(d / "sum_train.json"),
                "--validation_file",
                str(d / "sum_validation.json"),
                "--text_column",
                "text",
                "--summary_column",
                "summary",
                "--max_source_length",
                "96",
                "--max_target_length",
                "32",
                "--val_max_target_length",
                "16",
                "--predict_with_generate",
                "--max_eval_samples",
                "8",
                *text,
            ],
        ),
        Example(
            "run_translation",
            "translation/run_translation.py",
            [
                "--model_name_or_path",
                str(m / "bart"),
                "--train_file",
                str(d / "mt_train.json"),
                "--validation_file",
                str(d / "mt_validation.json"),
                "--source_lang",
                "en",
                "--target_lang",
                "de",
                "--max_source_length",
                "64",
                "--max_target_length",
                "64",
                "--val_max_target_length",
                "16",
                "--predict_with_generate",
                "--max_eval_samples",
                "8",
                *text,
            ],
        ),
        *media_examples(w),
        Example(
            "sft",
            "sft.py",
            [
                "--model_name_or_path",
                str(m / "gpt2"),
                "--dataset_name",
                str(d / "sft"),
                "--max_length",
                "96",
                "--eval_strategy",
                "no",
                "--bf16",
                "False",
            ],
            trl=True,
            eval=False,
        ),
        Example(  # TRL's own defaults otherwise: bf16 autocast and gradient checkpointing (on a CPU: use_cpu)
            "sft (TRL defaults)",
            "sft.py",
            ["--model_name_or_path", str(m / "gpt2"), "--dataset_name", str(d / "sft"), "--max_length", "96"]
            + ["--eval_strategy", "no", "--use_cpu", "True"],
            trl=True,
            eval=False,
            tolerance=2e-2,  # bf16: one ulp is 2^-8 relative, summed over 10 steps of training
        ),
    ]


def media_examples(w: Path) -> list[Example]:
    """Image classification on an image folder of random-pixel PNGs (a tiny ViT), audio classification and CTC
    speech recognition on audio folders of espeak-ng speech (a tiny Wav2Vec2; the CTC script builds its own
    character vocabulary). torchvision: the image script's transforms; torchcodec: how datasets 5 decodes
    audio (it needs FFmpeg's libraries)."""
    d, m = w / "data", w / "models"
    return [
        Example(
            "run_image_classification",
            "image-classification/run_image_classification.py",
            ["--model_name_or_path", str(m / "vit"), "--train_dir", str(d / "images" / "train")]
            + ["--validation_dir", str(d / "images" / "validation"), "--remove_unused_columns", "False"]
            + ["--do_train", "--do_eval"],
            requires=("torchvision",),
        ),
        Example(
            "run_audio_classification",
            "audio-classification/run_audio_classification.py",
            ["--model_name_or_path", str(m / "wav2vec2"), "--dataset_name", str(d / "audio_cls")]
            + ["--audio_column_name", "audio", "--label_column_name", "label", "--max_length_seconds", "2"]
            + ["--remove_unused_columns", "False", "--do_train", "--do_eval"],
            requires=("torchcodec",),
        ),
        Example(
            "run_speech_recognition_ctc",
            "speech-recognition/run_speech_recognition_ctc.py",
            ["--model_name_or_path", str(m / "wav2vec2"), "--dataset_name", str(d / "asr")]
            + ["--train_split_name", "train", "--eval_split_name", "validation", "--text_column_name", "text"]
            + ["--audio_column_name", "audio", "--max_duration_in_seconds", "3", "--do_train", "--do_eval"],
            requires=("torchcodec",),
        ),
    ]


# --- local assets -------------------------------------------------------------------------------------


def build_assets(w: Path, dropout: float | None, media: bool = True) -> None:
    """Corpus text, tokenizer, tiny configs and initial models, and every script's data files (`media`: the
    image and audio examples' models and folders too)."""
    import torch
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        GPT2Config,
        GPT2LMHeadModel,
        RobertaConfig,
        RobertaForMaskedLM,
    )

    from turbotrain.data import stdlib_corpus, train_tokenizer

    corpus = stdlib_corpus()
    paragraphs = [" ".join(p.split()) for p in corpus.paragraphs if len(p) > 80][:1200]
    tokenizer = train_tokenizer(corpus, vocab_size=2000)
    m, d = w / "models", w / "data"
    tokenizer.save_pretrained(m / "tokenizer")
    vocab = len(tokenizer)
    special = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2)

    def dropped(**names) -> dict:
        return {} if dropout is None else {k: dropout for k in names}

    configs = {
        "roberta": RobertaConfig(
            vocab_size=vocab,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=128,
            max_position_embeddings=514,
            type_vocab_size=1,
            **special,
            **dropped(hidden_dropout_prob=1, attention_probs_dropout_prob=1),
        ),
        "gpt2": GPT2Config(
            vocab_size=vocab,
            n_embd=64,
            n_layer=2,
            n_head=2,
            n_positions=128,
            **special,
            **dropped(resid_pdrop=1, embd_pdrop=1, attn_pdrop=1),
        ),
        "bart": BartConfig(
            vocab_size=vocab,
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            max_position_embeddings=128,
            decoder_start_token_id=2,
            forced_eos_token_id=2,
            **special,
            **dropped(dropout=1, attention_dropout=1, activation_dropout=1),
        ),
    }
    models = {"roberta": RobertaForMaskedLM, "gpt2": GPT2LMHeadModel, "bart": BartForConditionalGeneration}
    for name, config in configs.items():
        config.save_pretrained(m / f"{name}-config")
        torch.manual_seed(0)
        models[name](config).save_pretrained(m / name)
        tokenizer.save_pretrained(m / name)

    d.mkdir(parents=True, exist_ok=True)
    split = {"train": paragraphs[:1000], "validation": paragraphs[1000:1100]}
    for part, rows in split.items():
        (d / f"{part}.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
        with open(d / f"cls_{part}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["sentence1", "label"])
            for p in rows:
                writer.writerow([p[:300], int("return" in p)])
        write_jsonl(d / f"ner_{part}.json", [ner_row(p) for p in rows])
        (d / f"qa_{part}.json").write_text(json.dumps({"data": [qa_row(i, p) for i, p in enumerate(rows)]}))
        write_jsonl(d / f"sum_{part}.json", [{"text": p[:400], "summary": p.split(". ")[0][:120]} for p in rows])
        mt = [{"translation": {"en": p[:200], "de": " ".join(reversed(p[:200].split()))}} for p in rows]
        write_jsonl(d / f"mt_{part}.json", mt)
        write_jsonl(d / "sft" / f"{part}.jsonl", [{"text": p[:400]} for p in rows])
    if media:
        build_media_assets(w, paragraphs)


def build_media_assets(w: Path, paragraphs: list[str]) -> None:
    """A tiny ViT and Wav2Vec2 with their processors; an image folder (2 classes of random-pixel 40 x 40 PNGs,
    32 + 8) and audio folders (espeak-ng sentences as 16 kHz WAV files, 32 + 8, with their text and a label:
    whether the sentence has a comma) where espeak-ng is installed."""
    import numpy as np
    import torch
    from PIL import Image
    from transformers import (
        ViTConfig,
        ViTForImageClassification,
        ViTImageProcessor,
        Wav2Vec2Config,
        Wav2Vec2FeatureExtractor,
        Wav2Vec2ForCTC,
    )

    m, d = w / "models", w / "data"
    torch.manual_seed(0)
    vit = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
                    patch_size=8, num_labels=2)  # fmt: skip
    ViTForImageClassification(vit).save_pretrained(m / "vit")
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(m / "vit")
    speech = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                            conv_dim=(32, 32, 32), conv_kernel=(10, 3, 3), conv_stride=(5, 4, 4),
                            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, vocab_size=40,
                            mask_time_prob=0.0, feat_extract_norm="layer", do_stable_layer_norm=True)  # fmt: skip
    Wav2Vec2ForCTC(speech).save_pretrained(m / "wav2vec2")
    Wav2Vec2FeatureExtractor(return_attention_mask=True).save_pretrained(m / "wav2vec2")
    generator = np.random.default_rng(0)
    for part, count in (("train", 32), ("validation", 8)):
        for i in range(count):
            label = "bright" if i % 2 else "dark"
            pixels = generator.integers(0, 128, (40, 40, 3)) + (127 if label == "bright" else 0)
            (d / "images" / part / label).mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels.astype("uint8")).save(d / "images" / part / label / f"{i}.png")
    _write_speech_folders(d, paragraphs)


def _write_speech_folders(d: Path, paragraphs: list[str]) -> None:
    import wave

    from turbotrain.data.speech import corpus_sentences, espeak_available, speak

    if not espeak_available():
        return
    sentences = corpus_sentences(paragraphs, 40, max_words=6, seed=0)
    for folder in ("asr", "audio_cls"):
        for part, rows in (("train", sentences[:32]), ("validation", sentences[32:])):
            target = d / folder / part
            target.mkdir(parents=True, exist_ok=True)
            with open(target / "metadata.csv", "w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                writer.writerow(["file_name", "text", "label"])
                for i, text in enumerate(rows):
                    samples = (speak(text) * 32767).astype("int16")
                    with wave.open(str(target / f"{i}.wav"), "wb") as out:
                        out.setnchannels(1), out.setsampwidth(2), out.setframerate(16_000)
                        out.writeframes(samples.tobytes())
                    writer.writerow([f"{i}.wav", text.lower(), int("," in text)])


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def ner_row(paragraph: str) -> dict:
    words = paragraph.split()[:48]
    tags = ["B-CAP" if w[:1].isupper() else "B-NUM" if any(c.isdigit() for c in w) else "O" for w in words]
    return {"tokens": words, "ner_tags": tags}


def qa_row(i: int, paragraph: str) -> dict:
    context = paragraph[:500]
    words = context.split()
    k = len(words) // 2
    answer = words[k]
    start = len(" ".join(words[:k])) + (1 if k else 0)
    return {
        "id": str(i),
        "title": "doc",
        "context": context,
        "question": f"What follows {words[k - 1]}?",
        "answers": {"text": [answer], "answer_start": [start]},
    }


SHIM_EVALUATE = '''"""Offline stand-in for `evaluate` (scripts/hf_examples.py): simple local metrics, same keys."""


class _Metric:
    def __init__(self, name):
        self.name = name

    def compute(self, predictions=None, references=None, **kwargs):
        p, r = list(predictions), list(references)
        if self.name == "squad":
            em = sum(a["prediction_text"] == b["answers"]["text"][0] for a, b in zip(p, r))
            return {"exact_match": 100.0 * em / max(len(p), 1), "f1": 100.0 * em / max(len(p), 1)}
        if self.name == "seqeval":
            flat = [(a, b) for x, y in zip(p, r) for a, b in zip(x, y)]
            acc = sum(a == b for a, b in flat) / max(len(flat), 1)
            return {"overall_precision": acc, "overall_recall": acc, "overall_f1": acc, "overall_accuracy": acc}
        if self.name in ("rouge", "sacrebleu", "wer"):
            hits = [len(set(str(a).split()) & set(str(b if isinstance(b, str) else b[0]).split())) for a, b in zip(p, r)]
            score = sum(hits) / max(sum(len(str(a).split()) for a in p), 1)
            if self.name == "rouge":
                return {k: score for k in ("rouge1", "rouge2", "rougeL", "rougeLsum")}
            return {"score": 100 * score} if self.name == "sacrebleu" else 1 - score
        if self.name == "mse":
            return {"mse": sum((float(a) - float(b)) ** 2 for a, b in zip(p, r)) / max(len(p), 1)}
        return {"accuracy": sum(int(a) == int(b) for a, b in zip(p, r)) / max(len(p), 1)}


def load(name, *args, **kwargs):
    return _Metric(name)
'''
SHIM_NLTK = '''"""Offline stand-in for `nltk` (scripts/hf_examples.py): punkt-free sentence split."""
import re
import types

data = types.SimpleNamespace(find=lambda name: name)


def download(*args, **kwargs):
    return True


def sent_tokenize(text):
    return [s for s in re.split(r"(?<=[.!?])\\s+", text) if s]
'''


def write_shims(w: Path) -> Path:
    import importlib.util

    shims = w / "shims"
    shims.mkdir(parents=True, exist_ok=True)
    for name, text in (("evaluate", SHIM_EVALUATE), ("nltk", SHIM_NLTK)):
        if importlib.util.find_spec(name) is None:
            (shims / f"{name}.py").write_text(text)
    return shims


# --- the rename ---------------------------------------------------------------------------------------

_IMPORT = re.compile(r"^(?P<indent>[ \t]*)from (?P<module>[\w.]+) import (?P<names>\([^)]*\)|[^\n]*)$", re.M)


def swap_names(source: str) -> str:
    """The user's edit: every class name in RENAMES renamed, and the renamed names imported from turbotrain."""
    for old, new in RENAMES.items():
        source = re.sub(rf"\b{old}\b", new, source)

    def fix_import(match: re.Match) -> str:
        indent, names = match["indent"], match["names"]
        parts = [n.strip() for n in names.strip("()").replace("\n", ",").split(",") if n.strip()]
        turbo = [n for n in parts if n in RENAMES.values()]
        if not turbo or match["module"] == "turbotrain":
            return match[0]
        rest = [n for n in parts if n not in turbo]
        lines = [f"{indent}from {match['module']} import ({', '.join(rest)})"] if rest else []
        return "\n".join([*lines, f"{indent}from turbotrain import {', '.join(turbo)}"])

    return _IMPORT.sub(fix_import, source)


def prepare(example: Example, scripts_dir: Path, w: Path, variant: str) -> Path:
    """A copy of the example's script (and its sibling files): renamed for "swapped", as is otherwise."""
    source = scripts_dir / example.script
    target = w / "scripts" / variant / example.script
    target.parent.mkdir(parents=True, exist_ok=True)
    for path in [source, *(source.parent / f for f in example.extra_files)]:
        text = path.read_text()
        (target.parent / path.name).write_text(swap_names(text) if variant == "swapped" else text)
    return target


# --- running and comparing ----------------------------------------------------------------------------


@dataclass
class Run:
    rc: int
    seconds: float
    losses: dict[int, float]
    metrics: dict[str, float]
    runtime: float | None
    tail: str
    summary: str


def launcher(variant: str) -> list[str]:
    """How a variant starts its script: `python script.py`, or `python -m turbotrain script.py` (zero edits)."""
    return [sys.executable, "-m", "turbotrain"] if variant == "run" else [sys.executable]


ABORT_RETRY = "a rank aborted after training (SIGABRT at exit); launched once more"


def aborted_at_exit(returncode: int, log: str, finished: bool | None = None) -> bool:
    """Whether a multi-process launch failed only because a rank aborted after its training finished: torch 2.13's
    gloo process group at interpreter exit sometimes ends a rank with "terminate called without an active
    exception" (SIGABRT) once the script is done, stock runs included (seen under torchrun and accelerate on 2-core
    CI machines). Such a launch is run once more; any other failure, or a second abort, stands. `finished`: whether
    the script's work was done (default: Trainer printed its train_runtime)."""
    if returncode == 0 or ABORT_RETRY in log:
        return False
    finished = "train_runtime" in log if finished is None else finished
    return finished and ("Signal 6 (SIGABRT)" in log or "terminate called without an active exception" in log)


def run_one(
    example: Example, script: Path, w: Path, variant: str, env: dict, launch: list[str] | None = None, extra=()
) -> Run:
    """One run of `script`, started by `launch` (default: the variant's launcher) with `extra` arguments last."""
    out = w / "out" / example.name.replace(" ", "_") / variant
    shutil.rmtree(out, ignore_errors=True)
    launch = launch if launch is not None else launcher(variant)
    cmd = ["nice", "-n", "19", *launch, str(script), *COMMON, *example.args, *extra, "--output_dir", str(out)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=script.parent, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    if aborted_at_exit(proc.returncode, log):  # torch's gloo teardown, seen on stock ranks too: run it once more
        shutil.rmtree(out, ignore_errors=True)
        proc = subprocess.run(cmd, env=env, cwd=script.parent, capture_output=True, text=True)
        log += f"\n--- {ABORT_RETRY} ---\n" + proc.stdout + proc.stderr
    if example.resume and variant != "stock" and proc.returncode == 0:
        (out / "trainer_state.json").unlink(missing_ok=True)  # the losses must come from the resumed run
        cmd += ["--resume_from_checkpoint", str(out / "checkpoint-5")]
        proc = subprocess.run(cmd, env=env, cwd=script.parent, capture_output=True, text=True)
        log += "\n--- resumed from checkpoint-5 ---\n" + proc.stdout + proc.stderr
    seconds = time.perf_counter() - start
    (w / "out" / f"{example.name.replace(' ', '_')}.{variant}.log").write_text(" ".join(cmd) + "\n" + log)
    history = []
    for state in [out / "trainer_state.json", *sorted(out.glob("checkpoint-*/trainer_state.json"))]:
        if state.exists():
            history = json.loads(state.read_text())["log_history"]
            break
    losses = {e["step"]: e["loss"] for e in history if "loss" in e}
    metrics = {}
    for name in ("eval_results.json", "all_results.json"):
        if (out / name).exists():
            metrics.update(json.loads((out / name).read_text()))
    metrics = {k: v for k, v in metrics.items() if k.startswith("eval_") and isinstance(v, (int, float))}
    for k in ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second"):
        metrics.pop(k, None)
    runtime = next((e["train_runtime"] for e in history if "train_runtime" in e), None)
    if runtime is None and (out / "train_results.json").exists():
        runtime = json.loads((out / "train_results.json").read_text()).get("train_runtime")
    if runtime is None:  # scripts that save no state (TRL's sft.py): the last printed train_runtime
        found = re.findall(r"'train_runtime': '?([0-9.]+)", log)
        runtime = float(found[-1]) if found else None
    summary = next(
        (
            line.split("turbotrain:", 1)[1].strip()
            for line in log.splitlines()
            if "turbotrain:" in line and "backend" in line
        ),
        "",
    )
    return Run(proc.returncode, seconds, losses, metrics, runtime, "\n".join(log.splitlines()[-25:]), summary)


def importable(module: str, env: dict) -> bool:
    """Whether the scripts' interpreter (same PYTHONPATH) can import `module`."""
    probe = [sys.executable, "-c", f"import {module}"]
    return subprocess.run(probe, env=env, capture_output=True).returncode == 0


def rel_diff(a: dict, b: dict) -> float:
    keys = sorted(set(a) & set(b))
    if not keys or set(a) != set(b):
        return math.inf
    return max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-12) for k in keys)


def script_env(w: Path, shims: Path) -> dict:
    """The environment of every run: offline, the shims and this turbotrain on an absolute PYTHONPATH."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(w / "datasets-cache"),
        "TOKENIZERS_PARALLELISM": "false",
        # absolute: each script runs in its own folder, where a relative PYTHONPATH=src would find nothing
        # and the swapped run would silently import another turbotrain
        "PYTHONPATH": os.pathsep.join(
            os.path.abspath(p) for p in [str(shims), *os.environ.get("PYTHONPATH", "").split(os.pathsep)] if p
        ),
    }


def installed_trl_scripts() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("trl")
    return Path(spec.origin).parent / "scripts" if spec else None


def compare(stock: Run, other: Run, tolerance: float, name: str) -> tuple[float, float | None, str]:
    """(max relative loss difference, the same for eval metrics or None, status) of two runs."""
    loss_diff = rel_diff(stock.losses, other.losses)
    eval_diff = rel_diff(stock.metrics, other.metrics) if stock.metrics else None
    if stock.rc != 0:
        status = f"stock failed (rc {stock.rc})"
    elif other.rc != 0:
        status = f"{name} CRASHED (rc {other.rc})"
    elif loss_diff > tolerance or (eval_diff is not None and eval_diff > max(tolerance, 1e-4)):
        status = "LOSS DIFFERS"
    else:
        status = "ok"
    return loss_diff, eval_diff, status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples-dir", type=Path, required=True, help="a transformers checkout's examples/pytorch")
    parser.add_argument("--trl-scripts-dir", type=Path, help="TRL's trl/scripts (default: the installed trl's)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/turbotrain-hf-examples"))
    parser.add_argument("--only", nargs="*", help="run only these examples (names as in the table)")
    parser.add_argument("--tolerance", type=float, default=1e-5, help="largest relative loss difference that passes")
    parser.add_argument(
        "--dropout", type=float, default=None, help="set every dropout of the tiny configs (default: keep)"
    )
    parser.add_argument(
        "--launcher",
        nargs="+",
        default=["rename"],
        choices=sorted(LAUNCHERS),
        help="rename: the scripts with the class names swapped; run: the unmodified scripts under `turbotrain run`",
    )
    args = parser.parse_args(argv)

    w = args.work
    build_assets(w, args.dropout)
    env = script_env(w, write_shims(w))
    probe = [sys.executable, "-c", "import turbotrain; print(turbotrain.__file__)"]
    print(
        "turbotrain runs import", subprocess.run(probe, env=env, cwd=w, capture_output=True, text=True).stdout.strip()
    )
    trl_dir = args.trl_scripts_dir or installed_trl_scripts()
    variants = [LAUNCHERS[name] for name in args.launcher]

    rows = []
    for example in examples(w):
        if args.only and example.name not in args.only:
            continue
        scripts_dir = trl_dir if example.trl else args.examples_dir
        if scripts_dir is None or not (scripts_dir / example.script).exists():
            rows.append((example.name, "-", "-", "-", "-", "skipped: script not found", ""))
            continue
        missing = [name for name in example.requires if not importable(name, env)]
        if missing:
            rows.append((example.name, "-", "-", "-", "-", f"skipped: needs {', '.join(missing)} (not installed)", ""))
            continue
        runs = {v: run_one(example, prepare(example, scripts_dir, w, v), w, v, env) for v in ("stock", *variants)}
        stock = runs["stock"]
        for variant in variants:
            other = runs[variant]
            tolerance = example.tolerance if example.tolerance is not None else args.tolerance
            loss_diff, eval_diff, status = compare(stock, other, tolerance, variant)
            ratio = stock.runtime / other.runtime if stock.runtime and other.runtime else None
            rows.append(
                (
                    example.name,
                    WAYS[variant],
                    f"{loss_diff:.1e}" if stock.losses else "-",
                    f"{eval_diff:.1e}" if eval_diff is not None else "-",
                    f"{ratio:.2f}x" if ratio else "-",
                    status,
                    other.summary,
                )
            )
            print(f"[{example.name}, {variant}] {status}; steps {len(stock.losses)}/{len(other.losses)}", flush=True)
            if status != "ok":
                print((other if stock.rc == 0 else stock).tail, flush=True)

    print(
        "\n| script | turbotrain by | max rel. loss diff | max rel. eval diff | train time stock/turbo | status | turbotrain |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0 if all(r[5] == "ok" or r[5].startswith("skipped") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
