"""Fill-mask examples: ~10 held-out sentences chosen by a fixed rule, guessed by the saved model.

Rule (deterministic, never hand-picked): walk the held-out paragraphs in their held-out order; take
each paragraph's first sentence if it is plain prose (capital first letter, letters, spaces, commas,
hyphens and apostrophes only, ending in a full stop, 6-24 words, at most `max_len` tokens: the model's positions); mask the word nearest the middle
(not the first word) that has 4+ lowercase letters and is one token of the tokenizer; stop at `count`.
The saved model is loaded in a stock `fill-mask` pipeline; each line shows its top guesses and the
rank of the true word among all tokens (1 = its first guess).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase, pipeline

_PROSE = re.compile(r"^[A-Z][A-Za-z ,'-]+\.$")
_WORD = re.compile(r"^[a-z]{4,}$")


@dataclass
class Probe:
    text: str  # the sentence with <mask> in place of `word`
    word: str


@dataclass
class Guess:
    probe: Probe
    top: list[tuple[str, float]]
    rank: int


def first_sentence(paragraph: str) -> str:
    flat = " ".join(paragraph.split())
    end = flat.find(". ")
    return flat if end < 0 else flat[: end + 1]


def make_probe(sentence: str, tokenizer: PreTrainedTokenizerBase, max_len: int = 512) -> Probe | None:
    words = sentence.split(" ")
    if not _PROSE.match(sentence) or not 6 <= len(words) <= 24 or len(tokenizer.encode(sentence)) > max_len:
        return None
    middle = len(words) / 2
    for i in sorted(range(1, len(words)), key=lambda j: (abs(j - middle), j)):
        word = words[i].rstrip(".,")
        if _WORD.match(word) and len(tokenizer.encode(" " + word, add_special_tokens=False)) == 1:
            masked = " ".join(words[:i] + [words[i].replace(word, tokenizer.mask_token, 1)] + words[i + 1 :])
            return Probe(masked, word)
    return None


def choose_probes(
    paragraphs: list[str], tokenizer: PreTrainedTokenizerBase, max_len: int, count: int = 10
) -> list[Probe]:
    probes = []
    for paragraph in paragraphs:
        probe = make_probe(first_sentence(paragraph), tokenizer, max_len)
        if probe is not None:
            probes.append(probe)
            if len(probes) == count:
                break
    return probes


def fill_mask(model_dir: Path, probes: list[Probe], top_k: int = 3) -> list[Guess]:
    """Guesses of a stock `fill-mask` pipeline loaded from the saved directory, and the true word's rank."""
    unmasker = pipeline("fill-mask", model=str(model_dir), tokenizer=str(model_dir), device="cpu")
    guesses = []
    for probe in probes:
        top = [(g["token_str"].strip(), g["score"]) for g in unmasker(probe.text, top_k=top_k)]
        guesses.append(Guess(probe, top, _rank(unmasker.model, unmasker.tokenizer, probe)))
    return guesses


@torch.no_grad()
def _rank(model, tokenizer, probe: Probe) -> int:
    inputs = tokenizer(probe.text, return_tensors="pt")
    position = (inputs["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0, 0]
    logits = model(**inputs).logits[0, position]  # [V]
    true_id = tokenizer.encode(" " + probe.word, add_special_tokens=False)[0]
    return 1 + int((logits > logits[true_id]).sum())
