"""Seq2seq benchmark: stock `Seq2SeqTrainer` against turbotrain's on encoder-decoder workloads, interleaved.

Workloads (models built from configs, data made here, nothing downloaded):
* `asr`: a Whisper-shaped model (vocabulary 51,865, 80 mel bins, conv front end, encoder-decoder) fine-tuned
  on sentences of the built-in corpus spoken by espeak-ng (`data/speech.py`), features padded to
  `window_s` seconds (the encoder sees 50 positions per second), decoder targets the sentence's tokens at
  their natural length, padded with -100 to the longest of the batch.
* `bart`: a BART-shaped model (vocabulary 50,265): source a corpus paragraph (<= `source_len` tokens),
  target its first sentence (<= `target_len` tokens), batched by `DataCollatorForSeq2Seq` (labels padded
  with -100).
Peers: `stock` (`Seq2SeqTrainer`), `turbo` (`turbo(Seq2SeqTrainer)` on `backend`), `turbo:<backend>`,
`turbo:<backend>:key=value` (backend options, e.g. `turbo:inductor:scope=blocks`); `bf16` runs every peer
under bf16 autocast.
Every peer trains `warmup + steps` steps from the same weights on the same batches, peers interleaved
per round (A B C A B C ...). Reported per peer: median step seconds and its ratio to stock (end to end:
loading, collation, forward, backward, optimizer), label tokens/s and examples/s (medians over measured
steps), first-step seconds (compilation lands there), peak memory (memory.py) and the largest loss
difference from stock at the same step. Then `head_share.py` times the stock step against its head on the
same batches: the most label sparsity can give on the workload.
"""

from __future__ import annotations

import copy
import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
)

from turbotrain.args import turbo_arguments
from turbotrain.bench.head_share import measure_head_share
from turbotrain.bench.peers import peer_backend, segment_arguments, timed_train
from turbotrain.bench.report import environment
from turbotrain.data import stdlib_corpus, train_tokenizer
from turbotrain.measure.memory import PeakMemory
from turbotrain.trainer import turbo

WORKLOADS = {"asr": 51865, "bart": 50265}  # name -> vocabulary size


@dataclass
class Seq2SeqBench:
    workload: str = "asr"
    hidden_size: int = 256
    layers: int = 4  # encoder and decoder each
    heads: int = 4
    batch_size: int = 16
    examples: int = 256
    window_s: int = 5
    source_len: int = 128
    target_len: int = 64
    freeze_encoder: bool = False
    bf16: bool = False
    peers: tuple[str, ...] = ("stock", "turbo")
    backend: str = "eager"
    rounds: int = 3
    steps: int = 5
    warmup: int = 1
    seed: int = 0

    def __post_init__(self):
        if self.workload not in WORKLOADS:
            raise ValueError(f"unknown workload '{self.workload}'; choose from {', '.join(WORKLOADS)}")
        bad = [p for p in self.peers if p != "stock" and p.split(":", 1)[0] != "turbo"]
        if bad or not self.peers:
            raise ValueError(f"unknown peers {bad}; choose from stock, turbo, turbo:<backend>")

    @property
    def vocab_size(self) -> int:
        return WORKLOADS[self.workload]


class LabelCounter:
    """The user's collator, unchanged, noting each batch's kept labels, padded label slots and rows."""

    def __init__(self, inner):
        self.inner, self.kept, self.slots, self.rows = inner, [], [], []

    def __call__(self, features):
        batch = self.inner(features)
        labels = batch["labels"]
        self.kept.append(int((labels != -100).sum()))
        self.slots.append(labels.numel())
        self.rows.append(labels.shape[0])
        return batch


def initial_model(bench: Seq2SeqBench, tokenizer):
    torch.manual_seed(bench.seed)
    ids = dict(
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    sizes = dict(
        vocab_size=bench.vocab_size,
        d_model=bench.hidden_size,
        encoder_layers=bench.layers,
        decoder_layers=bench.layers,
        encoder_attention_heads=bench.heads,
        decoder_attention_heads=bench.heads,
        encoder_ffn_dim=4 * bench.hidden_size,
        decoder_ffn_dim=4 * bench.hidden_size,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        **ids,
    )
    if bench.workload == "bart":
        return BartForConditionalGeneration(BartConfig(max_position_embeddings=bench.source_len, **sizes))
    config = WhisperConfig(
        num_mel_bins=80,
        max_source_positions=50 * bench.window_s,
        max_target_positions=bench.target_len,
        suppress_tokens=[],
        begin_suppress_tokens=[],
        **sizes,
    )
    model = WhisperForConditionalGeneration(config)
    if bench.freeze_encoder:
        model.freeze_encoder()
    return model


def build_data(bench: Seq2SeqBench, corpus, tokenizer):
    """(train dataset, collator) for the workload."""
    if bench.workload == "asr":
        from turbotrain.data.speech import SpeechCollator, build_speech_data, corpus_sentences

        texts = corpus_sentences(corpus.paragraphs, bench.examples, seed=bench.seed)
        extractor = WhisperFeatureExtractor(feature_size=80, sampling_rate=16_000, chunk_length=bench.window_s)
        return build_speech_data(texts, tokenizer, extractor, bench.window_s), SpeechCollator()
    from datasets import Dataset

    paragraphs = [p for p in corpus.paragraphs if len(p.split()) >= 8][: bench.examples]
    targets = [p.split(". ")[0] for p in paragraphs]
    source = tokenizer(paragraphs, truncation=True, max_length=bench.source_len)
    target = tokenizer(text_target=targets, truncation=True, max_length=bench.target_len)
    columns = {
        "input_ids": source["input_ids"],
        "attention_mask": source["attention_mask"],
        "labels": target["input_ids"],
    }
    return Dataset.from_dict(columns).shuffle(seed=bench.seed), DataCollatorForSeq2Seq(tokenizer)


def build_trainer(peer: str, bench: Seq2SeqBench, model, dataset, collator, output_dir: str):
    common = segment_arguments(output_dir, bench.batch_size, bench.warmup + bench.steps, bench.seed)
    common.update(bf16=bench.bf16, use_cpu=bench.bf16 and not torch.cuda.is_available())
    model = copy.deepcopy(model)
    if peer == "stock":
        return Seq2SeqTrainer(
            model=model, args=Seq2SeqTrainingArguments(**common), train_dataset=dataset, data_collator=collator
        )
    backend, options = peer_backend(peer, bench.backend)
    args = turbo_arguments(Seq2SeqTrainingArguments)(backend=backend, backend_options=options, **common)
    return turbo(Seq2SeqTrainer)(model=model, args=args, train_dataset=dataset, data_collator=collator)


@dataclass
class PeerRuns:
    seconds: list[float] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    losses: list[list[float]] = field(default_factory=list)
    first_step_s: float | None = None
    peaks_mb: list[float] = field(default_factory=list)
    passes: list[str] = field(default_factory=list)
    backend_report: dict = field(default_factory=dict)


def run_segment(peer: str, bench: Seq2SeqBench, model, dataset, collator, runs: PeerRuns, memory: PeakMemory):
    counter = LabelCounter(collator)
    trainer, seconds, peak = timed_train(lambda tmp: build_trainer(peer, bench, model, dataset, counter, tmp), memory)
    if runs.first_step_s is None:
        runs.first_step_s = seconds[0]
    runs.seconds += seconds[bench.warmup :]
    runs.kept += counter.kept[bench.warmup : len(seconds)]
    runs.rows += counter.rows[bench.warmup : len(seconds)]
    runs.losses.append([e["loss"] for e in trainer.state.log_history if "loss" in e])
    runs.peaks_mb += [peak] if peak is not None else []
    report = getattr(trainer, "turbo_report", None)
    runs.passes = report.applied if report is not None else []
    backend = getattr(trainer, "backend", None)
    runs.backend_report = backend.report() if backend is not None else {}


def summarize(bench: Seq2SeqBench, runs: dict[str, PeerRuns], padding_share: float) -> dict:
    rows = {}
    for name, peer in runs.items():
        row = {
            "median_step_s": statistics.median(peer.seconds),
            "label_tokens_per_s": statistics.median(k / s for k, s in zip(peer.kept, peer.seconds)),
            "examples_per_s": statistics.median(r / s for r, s in zip(peer.rows, peer.seconds)),
            "first_step_s": peer.first_step_s,
            "peak_memory_mb": max(peer.peaks_mb, default=None),
            "passes": peer.passes,
            "backend_report": peer.backend_report,
        }
        stock = runs.get("stock")
        if stock is not None:
            pairs = [(a, b) for mine, ref in zip(peer.losses, stock.losses) for a, b in zip(mine, ref)]
            row["max_rel_loss_diff"] = max((abs(a - b) / abs(b) for a, b in pairs), default=float("nan"))
        rows[name] = row
    if "stock" in rows:
        for row in rows.values():
            row["ratio_to_stock"] = rows["stock"]["median_step_s"] / row["median_step_s"]
    return {"bench": asdict(bench), "environment": environment(), "label_padding_share": padding_share, "peers": rows}


def markdown_rows(result: dict) -> str:
    lines = [
        "| peer | step s (median) | x stock | label tokens/s | examples/s | first step s | peak MB | max rel dloss |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in result["peers"].items():
        lines.append(
            f"| {name} | {r['median_step_s']:.3f} | {r.get('ratio_to_stock', float('nan')):.2f}x | "
            f"{r['label_tokens_per_s']:,.0f} | {r['examples_per_s']:.1f} | {r['first_step_s']:.2f} | "
            f"{r['peak_memory_mb'] or 0:,.0f} | {r.get('max_rel_loss_diff', float('nan')):.1e} |"
        )
    return "\n".join(lines)


def run_seq2seq_bench(bench: Seq2SeqBench, out_dir: str = "bench-seq2seq") -> dict:
    corpus = stdlib_corpus()
    tokenizer = train_tokenizer(corpus, min(bench.vocab_size, 50265))
    dataset, collator = build_data(bench, corpus, tokenizer)
    model = initial_model(bench, tokenizer)
    memory = PeakMemory(torch.device("cpu"))
    runs = {peer: PeerRuns() for peer in bench.peers}
    for _ in range(bench.rounds):
        for peer in bench.peers:
            run_segment(peer, bench, model, dataset, collator, runs[peer], memory)
    sample = LabelCounter(collator)
    batches = [
        sample([dataset[i] for i in range(start, start + bench.batch_size)])
        for start in range(0, min(len(dataset), 8 * bench.batch_size), bench.batch_size)
    ]
    result = summarize(bench, runs, 1 - sum(sample.kept) / sum(sample.slots))
    share = measure_head_share(copy.deepcopy(model), batches[:4], rounds=2, bf16=bench.bf16)
    result["head_share"] = {**asdict(share), "share": share.share, "bound_sparse": share.bound_sparse}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "seq2seq.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "seq2seq.md").write_text(markdown_rows(result) + f"\n\n{share}\n")
    print(json.dumps(result["bench"]), f"\nlabel padding share {result['label_padding_share']:.2f}\n")
    print(markdown_rows(result))
    print(f"\n{share}")
    return result
