"""The built-in corpus, the tokenizer trained on it, and the masked-LM dataset built from both.

Nothing is downloaded: the corpus is the Python standard library's own docstrings and reference
topics, collected from the interpreter running turbotrain.
"""

from turbotrain.data.corpus import Corpus, CorpusError, load_corpus, stdlib_corpus, text_files_corpus
from turbotrain.data.mlm import MaskedLMData, build_mlm_data
from turbotrain.data.tokenizer import train_tokenizer

__all__ = [
    "Corpus",
    "CorpusError",
    "MaskedLMData",
    "build_mlm_data",
    "load_corpus",
    "stdlib_corpus",
    "text_files_corpus",
    "train_tokenizer",
]
