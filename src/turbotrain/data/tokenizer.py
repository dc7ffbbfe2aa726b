"""A RoBERTa-style byte-level BPE tokenizer trained locally on a corpus (Hugging Face `tokenizers`).

Special tokens as RoBERTa's: <s>=0, <pad>=1, </s>=2, <unk>=3, <mask>=4 (mask strips the space before it,
so "The <mask> module" works in the fill-mask pipeline). Training on the built-in corpus takes a few
seconds; the result is cached per (corpus, vocabulary size). A small corpus may yield fewer tokens
than asked for: `len(tokenizer)` is the truth, and models are sized from it (or from a larger
requested vocabulary, whose extra rows simply stay unused).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, ByteLevelBPETokenizer
from tokenizers.processors import RobertaProcessing
from transformers import PreTrainedTokenizerFast

from turbotrain.data.corpus import Corpus
from turbotrain.utils.cache import cache_dir, digest

SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def _wrap(backend) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token=AddedToken("<mask>", lstrip=True, rstrip=False, special=True),
        model_max_length=512,
    )


def _train(corpus: Corpus, vocab_size: int) -> ByteLevelBPETokenizer:
    backend = ByteLevelBPETokenizer()
    backend.train_from_iterator(
        corpus.paragraphs, vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS, show_progress=False
    )
    backend.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True)])
    backend.post_processor = RobertaProcessing(("</s>", 2), ("<s>", 0))
    return backend


def train_tokenizer(corpus: Corpus, vocab_size: int = 8000, cache: bool = True) -> PreTrainedTokenizerFast:
    """Train (or load from the cache) a byte-level BPE tokenizer with at most `vocab_size` tokens."""
    if vocab_size < 300:
        raise ValueError(f"vocab_size must be at least 300 (256 bytes + special tokens), got {vocab_size}")
    path = cache_dir() / f"tokenizer-v2-{digest(corpus.fingerprint(), str(vocab_size))}.json"
    if cache and path.exists():
        from tokenizers import Tokenizer

        return _wrap(Tokenizer.from_file(str(path)))
    backend = _train(corpus, vocab_size)
    if cache:
        tmp = path.with_suffix(".tmp")
        backend.save(str(tmp))
        Path(tmp).replace(path)
    return _wrap(backend._tokenizer if hasattr(backend, "_tokenizer") else backend)
