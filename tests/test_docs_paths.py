"""Every repository path a page names exists: README.md, docs/ and benchmarks/ pages, read as text.

What counts as a path named:
* a link's target (`[text](target)`), not a URL or an anchor: relative to the page, as a reader's browser
  resolves it;
* a word in a code span or a fenced block with a slash whose first folder is one of ours: a folder at the
  repository's root (`src/`, `tests/`, `scripts/`, `docs/`, `benchmarks/`...), in the package (`passes/`,
  `measure/`... under `src/turbotrain/`) or beside the page (`results/` under `benchmarks/`); it must
  exist under that folder's parent;
* a bare Python file name in a code span or a fenced block (`trainer.py`): some file of the repository
  has it, unless it names someone else's script (`FOREIGN_SCRIPTS`: `train.py`, Hugging Face's `run_*.py`).

Other words (outputs such as `out/loss.png` or `bench.json`, URLs, patterns with `*` or `{}`) are not paths
of the repository, and are left alone.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "turbotrain"
FOREIGN_SCRIPTS = re.compile(
    r"(run_\w+|script|train|notebook|trainer_qa|train_text_to_image|test_trainer_callback|test_training_args)\.py"
)
# Transformers' own test tree, which scripts/hf_trainer_tests.py runs from a checkout (never vendored here)
FOREIGN_PREFIXES = ("tests/trainer/", "tests/fixtures/")
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")
SEPARATORS = re.compile(r"[\s,;()=:'\"\[\]]+")
SKIPPED = ("http:", "https:", "mailto:", "#", "/", "~", "$", "-")


def pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md")), *sorted((root / "benchmarks").glob("*.md"))]


def file_names(root: Path) -> set[str]:
    """The names of the repository's Python files (its own folders only: a `.venv` in the clone is not read)."""
    folders = ("src", "tests", "scripts", "benchmarks", "docs")
    return {path.name for folder in folders for path in (root / folder).rglob("*.py")}


def code_words(text: str) -> list[str]:
    words = []
    for span in CODE.findall(text):
        for word in SEPARATORS.split(span.strip("`")):
            word = word.strip(".`").split("#")[0]
            if word and not word.startswith(SKIPPED) and not any(mark in word for mark in "*<>{}…|"):
                words.append(word)
    return words


def missing_paths(page: Path, root: Path = ROOT, names: set[str] | None = None) -> list[str]:
    """The paths `page` names that do not exist (see the module docstring for what counts)."""
    text = page.read_text(encoding="utf-8")
    names = file_names(root) if names is None else names
    package = root / "src" / "turbotrain"
    missing = []
    for target in LINK.findall(text):
        target = target.split("#")[0]
        if target and not target.startswith(SKIPPED) and not (page.parent / target).exists():
            missing.append(target)
    for word in code_words(text):
        first, slash, _ = word.partition("/")
        if slash and word.startswith(FOREIGN_PREFIXES):
            continue
        if slash:
            bases = [base for base in (root, package, page.parent) if (base / first).is_dir()]
            if bases and not any((base / word).exists() for base in bases):
                missing.append(word)
        elif word.endswith(".py") and word not in names and not FOREIGN_SCRIPTS.fullmatch(word):
            missing.append(word)
    return sorted(set(missing))


def test_every_path_a_page_names_exists():
    names = file_names(ROOT)
    missing = {str(page.relative_to(ROOT)): missing_paths(page, ROOT, names) for page in pages()}
    assert {page: paths for page, paths in missing.items() if paths} == {}


def test_a_stale_path_is_found(tmp_path):
    (tmp_path / "src" / "turbotrain" / "measure").mkdir(parents=True)
    (tmp_path / "src" / "turbotrain" / "measure" / "peak.py").write_text("")
    (tmp_path / "src" / "turbotrain" / "bench").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "bench.md").write_text("")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "The peak: `measure/peak.py` (was `bench/peak.py`), `src/turbotrain/bench/sft.py`, `models.py`, "
        "`peak.py`; see [bench](bench.md), [gone](gone.md#top) and [site](https://example.com).\n"
        "```bash\npython scripts/gpu_check.py --out out/report.md\npython train.py\n```\n"
    )
    (tmp_path / "scripts").mkdir()
    assert missing_paths(page, tmp_path) == [
        "bench/peak.py",
        "gone.md",
        "models.py",
        "scripts/gpu_check.py",
        "src/turbotrain/bench/sft.py",
    ]
