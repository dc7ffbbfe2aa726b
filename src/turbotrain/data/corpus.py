"""Text corpora: the built-in one (Python standard library documentation) and the user's own files.

The built-in corpus is real English technical prose that exists wherever Python does: every module,
class and function docstring of the standard library (parsed with `ast`, never imported) plus the
language-reference topics that `help()` shows (`pydoc_data.topics`). Test packages are skipped. On
CPython 3.11 that is ~8,600 docstrings and 79 topics, ~2.2 MB of text. Collecting it parses ~700
files (~10 s on one core); the result is cached per interpreter. Paragraphs are the unit: split on
blank lines, whitespace normalised, paragraphs that are mostly code or shorter than 40 characters
dropped.
"""

from __future__ import annotations

import ast
import multiprocessing
import re
import sys
import sysconfig
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from turbotrain.utils.cache import cache_dir, digest, write_atomically

SKIPPED_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
MIN_PARAGRAPH_CHARS = 40
MIN_LETTER_SHARE = 0.6


class CorpusError(ValueError):
    """The corpus could not be built (missing, unreadable or empty input)."""


@dataclass
class Corpus:
    name: str
    paragraphs: list[str]

    @property
    def num_chars(self) -> int:
        return sum(len(p) for p in self.paragraphs)

    def __len__(self) -> int:
        return len(self.paragraphs)

    def fingerprint(self) -> str:
        return digest(self.name, str(len(self)), *self.paragraphs[:50], *self.paragraphs[-50:])


def split_paragraphs(text: str) -> list[str]:
    """Prose paragraphs of `text`: blank-line separated, whitespace joined, code-like ones dropped."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        paragraph = " ".join(block.split())
        if len(paragraph) < MIN_PARAGRAPH_CHARS or paragraph.startswith(">>>"):
            continue
        letters = sum(c.isalpha() or c.isspace() for c in paragraph)
        if letters / len(paragraph) >= MIN_LETTER_SHARE:
            paragraphs.append(paragraph)
    return paragraphs


def _docstrings_of(path: str) -> list[str]:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
        return []
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [doc for node in ast.walk(tree) if isinstance(node, kinds) and (doc := ast.get_docstring(node))]


def stdlib_source_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py") if not SKIPPED_DIRS.intersection(p.relative_to(root).parts))


def _collect_stdlib_text(workers: int) -> str:
    files = [str(p) for p in stdlib_source_files()]
    # spawn, not fork: a process that already runs threads (ONNX Runtime, torch, a test session) can
    # deadlock its forked children on a lock some thread held at fork time (seen in CI).
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        docstrings = [doc for docs in pool.map(_docstrings_of, files, chunksize=16) for doc in docs]
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions strip pydoc_data
        topics = {}
    return "\n\n".join(docstrings + [topics[key] for key in sorted(topics)])


def stdlib_corpus(workers: int = 2) -> Corpus:
    """The built-in corpus, collected once per interpreter and cached as plain text."""
    key = digest(sys.version, sysconfig.get_paths()["stdlib"])
    cached = cache_dir() / f"stdlib-corpus-{key}.txt"
    if not cached.exists():
        write_atomically(cached, _collect_stdlib_text(workers))
    paragraphs = split_paragraphs(cached.read_text(encoding="utf-8"))
    if not paragraphs:
        raise CorpusError("the Python standard library on this machine yielded no documentation text")
    return Corpus(name=f"python-{sys.version_info.major}.{sys.version_info.minor}-stdlib-docs", paragraphs=paragraphs)


def text_files_corpus(paths: list[str | Path]) -> Corpus:
    """A corpus from the user's UTF-8 text files; each must exist, be readable and hold prose."""
    if not paths:
        raise CorpusError("no text files given")
    paragraphs: list[str] = []
    for path in map(Path, paths):
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CorpusError(f"text file not found: {path}") from None
        except IsADirectoryError:
            raise CorpusError(f"expected a text file, got a directory: {path}") from None
        except (OSError, UnicodeDecodeError) as error:
            raise CorpusError(f"cannot read {path} as UTF-8 text: {error}") from None
        found = split_paragraphs(text)
        if not found:
            raise CorpusError(
                f"{path} holds no usable text (empty, or no paragraph of {MIN_PARAGRAPH_CHARS}+ characters of prose)"
            )
        paragraphs.extend(found)
    return Corpus(name="files:" + ",".join(Path(p).name for p in paths), paragraphs=paragraphs)


def load_corpus(files: list[str | Path] | None = None) -> Corpus:
    """The user's files if given, else the built-in standard-library corpus."""
    return text_files_corpus(files) if files else stdlib_corpus()
