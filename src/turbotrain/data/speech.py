"""Speech made on this machine: sentences of the built-in corpus spoken by espeak-ng, as Whisper features.

Nothing is downloaded. `espeak-ng` (Debian: `apt-get install -y espeak-ng`, or `scripts/install-speech.sh`)
speaks each sentence to a 16-bit mono WAV file at 22,050 Hz (text on stdin, so no sentence is read as an
option; a file, since the WAV it streams to stdout declares no length); it is read with the standard library's
`wave`, resampled linearly to 16,000 Hz (Whisper's rate; a synthetic voice has little energy near the
new Nyquist frequency, so the aliasing is small), and turned into log-mel features by Transformers'
`WhisperFeatureExtractor`, padded to `window_s` seconds: [mel bins, 100 * window_s] per clip.

Sentences: from corpus paragraphs, split after `.`/`?`/`!`, kept when they have `min_words`..`max_words`
words of plain prose (a capital first, letters and `,;'-` only: no code; so the spoken clip fits the window: espeak-ng speaks ~175 words per minute).
Labels: the sentence's token ids (`<s> ... </s>` from the corpus tokenizer); the collator pads them
with -100 to the longest of the batch, as Transformers' Whisper fine-tuning recipe does.
`SpeechUnavailable` (naming the install line) is raised where espeak-ng is missing.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ESPEAK = "espeak-ng"
INSTALL = "apt-get install -y espeak-ng (see scripts/install-speech.sh)"
SAMPLING_RATE = 16_000
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")
_PLAIN = re.compile(r"[A-Z][A-Za-z ,;'-]*[a-z][.?!]")  # words, not code: no digits, brackets, colons, dots inside


class SpeechUnavailable(RuntimeError):
    """Speech cannot be made here; the message names what to install."""


def espeak_available() -> bool:
    return shutil.which(ESPEAK) is not None


def speak(text: str, words_per_minute: int = 175) -> np.ndarray:
    """`text` spoken by espeak-ng: float32 samples in [-1, 1] at 16,000 Hz, [samples]."""
    if not espeak_available():
        raise SpeechUnavailable(f"speech needs the {ESPEAK} program: {INSTALL}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "speech.wav"
        subprocess.run(
            [ESPEAK, "-w", str(path), "-s", str(words_per_minute), "--stdin"],
            input=text.encode(),
            capture_output=True,
            check=True,
        )
        with wave.open(str(path)) as wav:
            rate, width, channels = wav.getframerate(), wav.getsampwidth(), wav.getnchannels()
            frames = wav.readframes(wav.getnframes())
    if width != 2 or channels != 1:
        raise SpeechUnavailable(f"{ESPEAK} wrote {channels} channel(s) of {8 * width}-bit samples, not 16-bit mono")
    samples = np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0
    return resample(samples, rate, SAMPLING_RATE)


def resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Linear interpolation from `rate` to `target` Hz."""
    if rate == target or samples.size == 0:
        return samples
    count = int(round(samples.size * target / rate))
    positions = np.arange(count, dtype=np.float64) * (rate / target)
    return np.interp(positions, np.arange(samples.size), samples).astype(np.float32)


def corpus_sentences(
    paragraphs: list[str], count: int, min_words: int = 4, max_words: int = 12, seed: int = 0
) -> list[str]:
    """`count` distinct sentences of `min_words`..`max_words` plain-ASCII words, in a seeded random order."""
    found, seen = [], set()
    for paragraph in paragraphs:
        for sentence in _SENTENCE_END.split(" ".join(paragraph.split())):
            words = sentence.split()
            if min_words <= len(words) <= max_words and _PLAIN.fullmatch(sentence) and sentence not in seen:
                seen.add(sentence)
                found.append(sentence)
    random.Random(seed).shuffle(found)
    if len(found) < count:
        raise ValueError(f"only {len(found)} sentences of {min_words}-{max_words} words in the corpus, {count} asked")
    return found[:count]


@dataclass
class SpeechData:
    """Examples {"input_features": [mel, frames] float32, "labels": [T] token ids} and their texts."""

    examples: list[dict]
    texts: list[str]
    seconds: list[float]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict:
        return self.examples[index]


def build_speech_data(texts: list[str], tokenizer, feature_extractor, window_s: int) -> SpeechData:
    """Speak every text and extract features padded (or cut) to `window_s` seconds."""
    examples, seconds = [], []
    for text in texts:
        audio = speak(text)[: window_s * SAMPLING_RATE]
        seconds.append(audio.size / SAMPLING_RATE)
        features = feature_extractor(audio, sampling_rate=SAMPLING_RATE, return_tensors="np").input_features[0]
        examples.append({"input_features": features.astype(np.float32), "labels": tokenizer(text).input_ids})
    return SpeechData(examples, list(texts), seconds)


class SpeechCollator:
    """Stacks features [B, mel, frames]; pads labels to the longest with -100 [B, T]."""

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        longest = max(len(f["labels"]) for f in features)
        labels = torch.full((len(features), longest), -100, dtype=torch.long)
        for row, feature in enumerate(features):
            labels[row, : len(feature["labels"])] = torch.as_tensor(feature["labels"])
        stacked = np.stack([np.asarray(f["input_features"], dtype=np.float32) for f in features])
        return {"input_features": torch.from_numpy(stacked), "labels": labels}
