"""`turbo(Seq2SeqTrainer)` on Whisper: 10 golden steps equal to stock `Seq2SeqTrainer`, with the
sparse decoder head applied; and speech made by espeak-ng trains (skipped where espeak-ng is absent)."""

from __future__ import annotations

import pytest
import torch
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

from tests.tiny_seq2seq import MEL_BINS, make, speech_like_examples
from tests.trainer_helpers import COMMON, assert_losses_close, train_losses
from turbotrain import turbo, turbo_arguments
from turbotrain.data.speech import SpeechCollator


def trainers(tmp_path, family: str, data, collator):
    stock_args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "stock"), **COMMON)
    stock = Seq2SeqTrainer(model=make(family), args=stock_args, train_dataset=data, data_collator=collator)
    turbo_args = turbo_arguments(Seq2SeqTrainingArguments)(
        output_dir=str(tmp_path / "turbo"), backend="eager", **COMMON
    )
    fast = turbo(Seq2SeqTrainer)(model=make(family), args=turbo_args, train_dataset=data, data_collator=collator)
    return stock, fast


def test_whisper_golden_losses_ten_steps_match_stock_seq2seq_trainer(tmp_path):
    stock, fast = trainers(tmp_path, "whisper", speech_like_examples(), SpeechCollator())  # dropout 0.1 on
    assert fast.turbo_report.label_sparsity is not None
    assert_losses_close(train_losses(fast), train_losses(stock), rtol=1e-4)


@pytest.mark.requires_espeak
def test_espeak_speech_features_and_labels_train_a_whisper_step(tmp_path):
    from transformers import WhisperFeatureExtractor

    from turbotrain.data import stdlib_corpus, train_tokenizer
    from turbotrain.data.speech import build_speech_data, corpus_sentences

    corpus = stdlib_corpus()
    tokenizer = train_tokenizer(corpus, 300)
    texts = corpus_sentences(corpus.paragraphs, 4, max_words=6, seed=1)
    extractor = WhisperFeatureExtractor(feature_size=MEL_BINS, sampling_rate=16_000, chunk_length=2)
    data = build_speech_data(texts, tokenizer, extractor, window_s=2)
    assert all(0.3 < s <= 2.0 for s in data.seconds)
    batch = SpeechCollator()([data[i] for i in range(4)])
    assert batch["input_features"].shape == (4, MEL_BINS, 200)
    assert batch["input_features"].std() > 0.1  # speech, not silence
    lengths = [len(tokenizer(t).input_ids) for t in texts]
    assert batch["labels"].shape == (4, max(lengths)) and int((batch["labels"] != -100).sum()) == sum(lengths)
    model = make("whisper")
    model.config.max_source_positions = 100
    model = type(model)(model.config)  # positions for 2 s of audio (200 frames)
    model.resize_token_embeddings(300)
    turbo_args = turbo_arguments(Seq2SeqTrainingArguments)(output_dir=str(tmp_path), **{**COMMON, "max_steps": 2})
    trainer = turbo(Seq2SeqTrainer)(model=model, args=turbo_args, train_dataset=data, data_collator=SpeechCollator())
    losses = train_losses(trainer)
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
