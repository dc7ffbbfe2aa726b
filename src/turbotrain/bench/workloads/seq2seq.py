"""`--task seq2seq | asr`: stock `Seq2SeqTrainer` against turbotrain's on encoder-decoder models.

Models built from configs, data made here, nothing downloaded:
* `asr`: a Whisper-shaped model (vocabulary 51,865, 80 mel bins, conv front end, encoder-decoder)
  fine-tuned on sentences of the built-in corpus spoken by espeak-ng (data/speech.py), features padded to
  `--window-s` seconds (the encoder sees 50 positions per second), decoder targets the sentence's tokens
  at their natural length, padded with -100 to the longest of the batch.
* `seq2seq`: a BART-shaped model (vocabulary 50,265): source a corpus paragraph (<= `--source-len`
  tokens), target its first sentence (<= `--target-len` tokens), batched by `DataCollatorForSeq2Seq`
  (labels padded with -100).
`--layers` is the encoder's and the decoder's each; `--freeze-encoder` trains the decoder only (asr).
Peers: `stock` (`Seq2SeqTrainer`), `turbo` (`turbo(Seq2SeqTrainer)`, on `--backend`, eager by default),
`turbo:<backend>[:key=value]` (bench/peers.py). The throughput counts label tokens (what the decoder
and the head run on). After the rounds, `head_share.py` times the stock step against its head on the
same batches: the most label sparsity can give on the workload.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field

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

from turbotrain.backends import valid_choices
from turbotrain.bench.head_share import measure_head_share
from turbotrain.bench.peers import TrainerWorkload
from turbotrain.bench.workload import BenchData, register_workload
from turbotrain.data import stdlib_corpus, train_tokenizer

VOCABULARIES = {"asr": 51865, "seq2seq": 50265}  # Whisper's, BART's


@register_workload("seq2seq", "asr")
@dataclass
class EncoderDecoder(TrainerWorkload):
    peers: tuple[str, ...] = field(default=("stock", "turbo"), metadata={"help": "stock turbo turbo:<backend>"})
    backend: str = field(default="eager", metadata={"help": "the turbo peer's backend", "choices": valid_choices()})
    hidden_size: int = field(default=256, metadata={"help": "d_model"})
    num_layers: int = field(default=4, metadata={"help": "encoder and decoder layers, each"})
    num_heads: int = field(default=4, metadata={"help": "attention heads"})
    examples: int = field(default=256, metadata={"help": "training examples made"})
    window_s: int = field(default=5, metadata={"help": "asr: seconds of audio the encoder sees"})
    source_len: int = field(default=128, metadata={"help": "seq2seq: longest source, tokens"})
    target_len: int = field(default=64, metadata={"help": "longest target, tokens"})
    freeze_encoder: bool = field(default=False, metadata={"help": "asr: train the decoder only"})

    trainer_class = Seq2SeqTrainer
    arguments_class = Seq2SeqTrainingArguments
    unit = "label tokens"

    @property
    def vocab_size(self) -> int:
        return VOCABULARIES[self.task]

    def tokenizer(self):
        return train_tokenizer(stdlib_corpus(), min(self.vocab_size, 50265))

    def model(self):
        tokenizer = self.tokenizer()
        torch.manual_seed(self.seed)
        ids = dict(
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.bos_token_id,
        )
        sizes = dict(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_layers,
            decoder_layers=self.num_layers,
            encoder_attention_heads=self.num_heads,
            decoder_attention_heads=self.num_heads,
            encoder_ffn_dim=4 * self.hidden_size,
            decoder_ffn_dim=4 * self.hidden_size,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            **ids,
        )
        if self.task == "seq2seq":
            return BartForConditionalGeneration(BartConfig(max_position_embeddings=self.source_len, **sizes))
        config = WhisperConfig(
            num_mel_bins=80,
            max_source_positions=50 * self.window_s,
            max_target_positions=self.target_len,
            suppress_tokens=[],
            begin_suppress_tokens=[],
            **sizes,
        )
        model = WhisperForConditionalGeneration(config)
        if self.freeze_encoder:
            model.freeze_encoder()
        return model

    def data(self) -> BenchData:
        corpus, tokenizer = stdlib_corpus(), self.tokenizer()
        if self.task == "asr":
            from turbotrain.data.speech import SpeechCollator, build_speech_data, corpus_sentences

            texts = corpus_sentences(corpus.paragraphs, self.examples, seed=self.seed)
            extractor = WhisperFeatureExtractor(feature_size=80, sampling_rate=16_000, chunk_length=self.window_s)
            return BenchData(build_speech_data(texts, tokenizer, extractor, self.window_s), SpeechCollator())
        from datasets import Dataset

        paragraphs = [p for p in corpus.paragraphs if len(p.split()) >= 8][: self.examples]
        targets = [p.split(". ")[0] for p in paragraphs]
        source = tokenizer(paragraphs, truncation=True, max_length=self.source_len)
        target = tokenizer(text_target=targets, truncation=True, max_length=self.target_len)
        columns = {
            "input_ids": source["input_ids"],
            "attention_mask": source["attention_mask"],
            "labels": target["input_ids"],
        }
        return BenchData(Dataset.from_dict(columns).shuffle(seed=self.seed), DataCollatorForSeq2Seq(tokenizer))

    def title(self) -> str:
        name = "Whisper-shaped ASR" if self.task == "asr" else "BART-shaped seq2seq"
        frozen = ", encoder frozen" if self.freeze_encoder else ""
        sizes = f"h{self.hidden_size} L{self.num_layers}+{self.num_layers} vocab {self.vocab_size:,}"
        return f"{name}{frozen} {sizes} batch {self.batch_size}{self.run_suffix()}"

    def extras(self, model, data: BenchData) -> dict:
        """The head's share of the stock step on the first 4 batches (bench/head_share.py)."""
        size = self.batch_size
        starts = range(0, min(len(data.train), 4 * size), size)
        batches = [data.collator([data.train[i] for i in range(start, start + size)]) for start in starts]
        share = measure_head_share(copy.deepcopy(model), batches, rounds=2, bf16=self.bf16)
        return {
            "head_share": {
                **asdict(share),
                "share": share.share,
                "bound_sparse": share.bound_sparse,
                "line": str(share),
            }
        }
