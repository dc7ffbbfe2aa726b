"""The built-in corpus is real prose from the standard library; user files are read with clear errors."""

from __future__ import annotations

import pytest

from turbotrain.data import CorpusError, load_corpus, stdlib_corpus, text_files_corpus
from turbotrain.data.corpus import split_paragraphs


def test_stdlib_corpus_is_large_real_english():
    corpus = stdlib_corpus()
    assert len(corpus) > 5000 and corpus.num_chars > 1_000_000
    text = " ".join(corpus.paragraphs[:2000]).lower()
    for word in (" the ", " return ", " file ", " module "):
        assert word in text


def test_stdlib_corpus_is_deterministic():
    assert stdlib_corpus().paragraphs == stdlib_corpus().paragraphs


def test_split_paragraphs_drops_code_and_short_lines():
    text = (
        "Short.\n\n>>> print('a long doctest line that is code and not prose')\n\n"
        "This paragraph is long enough\n   to be kept as   prose.\n\n{}[]()=+-*/ {}[]()=+-*/ {}[]()=+-*/ {}[]()"
    )
    assert split_paragraphs(text) == ["This paragraph is long enough to be kept as prose."]


def test_user_files_replace_the_builtin_corpus(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text(
        "A first paragraph of my own text, long enough to keep.\n\nAnd a second paragraph, which is also long enough to be kept."
    )
    corpus = load_corpus([path])
    assert corpus.name == "files:mine.txt" and len(corpus) == 2


@pytest.mark.parametrize("content,match", [("", "no usable text"), ("   \n\n  ", "no usable text")])
def test_empty_file_gives_a_clear_error(tmp_path, content, match):
    path = tmp_path / "empty.txt"
    path.write_text(content)
    with pytest.raises(CorpusError, match=match):
        text_files_corpus([path])


def test_missing_and_unreadable_files_give_clear_errors(tmp_path):
    with pytest.raises(CorpusError, match="not found"):
        text_files_corpus([tmp_path / "nope.txt"])
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 100)
    with pytest.raises(CorpusError, match="cannot read"):
        text_files_corpus([binary])
    with pytest.raises(CorpusError, match="directory"):
        text_files_corpus([tmp_path])
