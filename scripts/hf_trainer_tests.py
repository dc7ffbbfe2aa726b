"""Run Transformers' Trainer tests (or TRL's trainer tests) stock and with turbotrain patched in: which differ.

    python scripts/hf_trainer_tests.py --tests-dir ~/transformers [--files F ...] [-k EXPR] [--extra-path DIR]
        [--hub-cache DIR]
    python scripts/hf_trainer_tests.py --suite trl --tests-dir ~/trl --hub-cache /tmp/trl-hub [--workers N]

`--tests-dir`: a Transformers checkout (its `tests/` folder and root `conftest.py`; the package itself is the
installed one). The test files (default: `tests/trainer/test_trainer.py`, `test_trainer_callback.py`,
`test_trainer_seq2seq.py` and `test_training_args.py`, wherever the checkout keeps it) run twice under this
interpreter, each in one pytest process with a JUnit report:

* stock: plain `pytest`;
* turbotrain: `pytest -p turbotrain.launch.pytest_plugin`, which installs, before any test module imports
  `transformers`, the patch `turbotrain run` installs (launch/patch.py): `transformers.Trainer` is `TurboTrainer`,
  and so on. `TURBOTRAIN_OPTIONS` passes options, as to `turbotrain run`.

Both runs are offline (`HF_HUB_OFFLINE=1`): tests that need the hub skip or fail the same way both times; only
differences matter. One line per test whose outcome differs (`passed` / `failed` / `error` / `skipped`, stock
first), then the last line: the counts of both runs and the number of tests that pass stock and fail turbotrain.
Exit code 1 when such a test exists. The test files are Transformers' (Apache-2.0), never copied into this
repository. `--extra-path` puts a folder on both runs' PYTHONPATH (test-only packages such as `parameterized`).

`--suite trl`: `--tests-dir` is a TRL checkout (its `tests/`; the package is the installed one, so the checkout's
own `trl/` folder must not be there: it would shadow it), the files TRL's SFT, DPO, KTO, GRPO and RLOO trainer
tests. They load tiny models, tokenizers and the `trl-internal-testing/zen` dataset from the hub: `--hub-cache DIR`
builds offline stand-ins there (scripts/trl_hub_assets.py; again when that script changed) and both runs read
them (`HF_HUB_CACHE`, `HF_DATASETS_CACHE`). Both runs also load scripts/trl_tests_plugin.py, which gives the
names a checkout's tests import and the installed TRL lacks a stand-in, so a version gap fails single tests both
ways rather than whole files. Transformers' suite takes `--hub-cache` too: its gradient-accumulation tests load
TRL's tiny Qwen2 and `Salesforce/wikitext` (a stand-in of made-up lines is built there as well). `--workers N` runs each pytest on N pytest-xdist workers. `--reports DIR` keeps both
runs' JUnit reports and output (`stock.xml`, `stock.log`, ...), where the failures' messages are.

A dev tool, not a test: the four Transformers files take ~10-20 min per run on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent

TRAINER_FILES = ("test_trainer.py", "test_trainer_callback.py", "test_trainer_seq2seq.py")
ARGS_FILE = "test_training_args.py"
TRL_FILES = tuple(f"tests/test_{name}_trainer.py" for name in ("sft", "dpo", "kto", "grpo", "rloo"))
PLUGIN = "turbotrain.launch.pytest_plugin"
WAYS = {"stock": [], "turbotrain": ["-p", PLUGIN]}


def default_files(tests_dir: Path, suite: str = "transformers") -> list[str]:
    """The Trainer test files of a checkout, relative to it; `test_training_args.py` where the checkout keeps it.
    TRL's suite: its five trainers' test files."""
    if suite == "trl":
        return list(TRL_FILES)
    files = [f"tests/trainer/{name}" for name in TRAINER_FILES]
    found = sorted(tests_dir.glob(f"tests/**/{ARGS_FILE}"))
    return files + [path.relative_to(tests_dir).as_posix() for path in found[:1]]


def run_tests(tests_dir: Path, files: list[str], way: str, report: Path, args) -> dict[str, str]:
    """Test id -> outcome of one pytest run of `files` (`way`: stock or turbotrain)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    package = str(SCRIPTS.parent / "src")
    paths, plugins = [*args.extra_path, package], []
    if args.hub_cache is not None:
        from scripts.trl_hub_assets import environment

        env.update(environment(args.hub_cache))
    if args.suite == "trl":
        paths, plugins = [*paths, str(SCRIPTS)], ["-p", "trl_tests_plugin"]
    env["PYTHONPATH"] = os.pathsep.join(p for p in [*paths, env.get("PYTHONPATH", "")] if p)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    command += [*WAYS[way], *plugins, *(["-n", str(args.workers)] if args.workers else [])]
    command += [*(["-k", args.k] if args.k else []), *files]
    print(f"[{way}] {' '.join(command)}", file=sys.stderr, flush=True)
    with open(report.with_suffix(".log"), "w") as log:
        subprocess.run(
            command, cwd=tests_dir, env=env, stdout=log, stderr=subprocess.STDOUT, check=False, timeout=args.timeout
        )
    return outcomes(report)


def prepare_hub_cache(folder: Path) -> None:
    """Builds scripts/trl_hub_assets.py's assets into `folder` unless they were built by this very script."""
    import hashlib

    source = (SCRIPTS / "trl_hub_assets.py").read_bytes()
    stamp, digest = folder / "trl_hub_assets.sha1", hashlib.sha1(source).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return
    from scripts.trl_hub_assets import build

    print(f"[assets] building the TRL hub stand-ins into {folder}", file=sys.stderr, flush=True)
    build(folder)
    stamp.write_text(digest)


def outcomes(report: Path) -> dict[str, str]:
    """Test id (`file::class::name`) -> passed, failed, error or skipped, from a JUnit XML report."""
    found = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcome = next((kind for kind in ("error", "failure", "skipped") if kind in kinds), "passed")
        found[name] = {"failure": "failed"}.get(outcome, outcome)
    return found


def compare(stock: dict[str, str], turbo: dict[str, str]) -> tuple[list[str], str, int]:
    """(one line per test whose outcome differs, the counts line, how many pass stock and not turbotrain)."""
    lines = [
        f"{name}: stock {stock.get(name, 'absent')}, turbotrain {turbo.get(name, 'absent')}"
        for name in sorted(set(stock) | set(turbo))
        if stock.get(name) != turbo.get(name)
    ]
    broken = sum(1 for name, outcome in stock.items() if outcome == "passed" and turbo.get(name) != "passed")
    counts = {way: Counter(found.values()) for way, found in (("stock", stock), ("turbotrain", turbo))}
    shown = "; ".join(
        f"{way}: " + ", ".join(f"{counts[way][kind]} {kind}" for kind in ("passed", "failed", "error", "skipped"))
        for way in counts
    )
    return lines, f"{shown}; {len(lines)} differ; {broken} pass stock and not turbotrain", broken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests-dir", type=Path, required=True, help="a Transformers (or TRL) checkout")
    parser.add_argument("--suite", choices=("transformers", "trl"), default="transformers", help="whose tests")
    parser.add_argument("--files", nargs="+", help="test files relative to --tests-dir (default: the suite's)")
    parser.add_argument("-k", help="pytest -k expression, for both runs")
    parser.add_argument("--extra-path", action="append", default=[], help="a folder for both runs' PYTHONPATH")
    parser.add_argument("--hub-cache", type=Path, help="where the offline hub stand-ins are (built if not)")
    parser.add_argument("--workers", type=int, default=0, help="pytest-xdist workers per run (default: none)")
    parser.add_argument("--reports", type=Path, help="keep both runs' JUnit XML and output here")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per run")
    args = parser.parse_args(argv)
    tests_dir = args.tests_dir.resolve()
    if args.suite == "trl":
        if (tests_dir / "trl" / "__init__.py").exists():
            parser.error(
                f"{tests_dir / 'trl'} would shadow the installed TRL: remove it (the tests run against "
                "the installed package)"
            )
        if args.hub_cache is None:
            parser.error("--suite trl needs --hub-cache DIR (the offline models and datasets are built there)")
    if args.hub_cache is not None:
        sys.path.insert(0, str(SCRIPTS.parent))  # scripts.trl_hub_assets
        args.hub_cache = args.hub_cache.resolve()
        prepare_hub_cache(args.hub_cache)
    files = args.files or default_files(tests_dir, args.suite)
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.reports or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        found = {way: run_tests(tests_dir, files, way, folder.resolve() / f"{way}.xml", args) for way in WAYS}
    lines, counts, broken = compare(found["stock"], found["turbotrain"])
    print("\n".join([*lines, counts]))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
