"""Reliability probes of bad input: `turbotrain export`, the on-device runtime, TurboTrainingArguments
and the padding-free pass, all in process. See scripts/reliability.py."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scripts.reliability_common import CLEAR, LOST, RIGHT, SKIPPED, TRACEBACK, WRONG, Probe, cut, raises_clearly

# ---------------------------------------------------------------- export (in process, the CLI's main)


def _export(*argv: str) -> tuple[int, str]:
    from turbotrain.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["export", *argv])
        except Exception as error:  # noqa: BLE001
            return -1, f"Traceback: {type(error).__name__}: {error}"
    return code, err.getvalue()


def _saved_model(scratch: Path) -> Path:
    from tests import tiny_models

    tiny_models.make("bert").save_pretrained(str(scratch / "model"))
    return scratch / "model"


def _export_refusal(argv_of: Callable[[Path], list[str]], pattern: str) -> Callable[[Path], tuple[str, str]]:
    def run(scratch: Path) -> tuple[str, str]:
        code, err = _export(*argv_of(scratch))
        lines = [line for line in err.splitlines() if line.strip()]
        if code == 0:
            return WRONG, "exported"
        clear = code > 0 and len(lines) == 1 and "Traceback" not in err and re.search(pattern, err)
        return (CLEAR if clear else TRACEBACK), (lines[-1][:110] if lines else "")

    return run


def _stale_variants(scratch: Path) -> tuple[str, str]:
    model, out = _saved_model(scratch), scratch / "onnx"
    _export(str(model), str(out), "--optimize", "--quantize", "int8")
    _export(str(model), str(out), "--overwrite")
    stale = sorted({"model.optimized.onnx", "model.int8.onnx"} & {p.name for p in out.iterdir()})
    return (
        (WRONG, f"left beside the new model.onnx: {stale}")
        if stale
        else (RIGHT, "the earlier export was replaced whole")
    )


def _failed_verification(scratch: Path) -> tuple[str, str]:
    model, out = _saved_model(scratch), scratch / "onnx"
    _export(str(model), str(out))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, _ = _export(str(model), str(out), "--tolerance", "0", "--overwrite")
    if code == 0:
        return SKIPPED, "ONNX Runtime matched torch bit for bit; verification did not fail"
    after = {p.name: p.read_bytes() for p in out.iterdir()} if out.exists() else {}
    leftovers = [p.name for p in scratch.iterdir() if p.name not in {"model", "onnx"}]
    if after != before:
        return LOST, "the earlier export was changed by a failed one"
    return (WRONG, f"left behind: {leftovers}") if leftovers else (RIGHT, "exit 1, the earlier export untouched")


def _second_export(scratch: Path) -> tuple[str, str]:
    """Issue 46: an export into the folder of an earlier one without --overwrite is refused, every file kept."""
    model, out = _saved_model(scratch), scratch / "onnx"
    _export(str(model), str(out))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, err = _export(str(model), str(out))
    if {p.name: p.read_bytes() for p in out.iterdir()} != before:
        return LOST, "the earlier export was replaced without --overwrite"
    lines = [line for line in err.splitlines() if line.strip()]
    clear = code == 2 and len(lines) == 1 and "--overwrite" in lines[0]
    return (CLEAR if clear else WRONG if code == 0 else TRACEBACK), (lines[-1][:110] if lines else f"exit {code}")


def export_probes() -> list[Probe]:
    def truncated(scratch):
        model = _saved_model(scratch)
        cut("model.safetensors", 0.3)(model)
        return [str(model), str(scratch / "onnx")]

    def other_folder(scratch):
        (scratch / "mine").mkdir()
        (scratch / "mine" / "notes.txt").write_text("keep")
        return [str(_saved_model(scratch)), str(scratch / "mine")]

    return [
        Probe(
            "export",
            "model dir that does not exist",
            CLEAR,
            _export_refusal(lambda s: [str(s / "nope"), str(s / "onnx")], "does not exist"),
        ),
        Probe(
            "export",
            "folder without a model",
            CLEAR,
            _export_refusal(lambda s: [str(s), str(s / "onnx")], "config.json"),
        ),
        Probe("export", "truncated model.safetensors", CLEAR, _export_refusal(truncated, "cannot be read")),
        Probe(
            "export", "target folder holding other files", CLEAR, _export_refusal(other_folder, "not an earlier export")
        ),
        Probe("export", "a second export into the same folder, no --overwrite", CLEAR, _second_export),
        Probe("export", "--overwrite over an earlier --optimize --quantize int8 export", RIGHT, _stale_variants),
        Probe("export", "verification fails (--tolerance 0) over an earlier export", RIGHT, _failed_verification),
    ]


# ---------------------------------------------------------------- on-device runtime (in process)

_ARTIFACTS: dict[str, Path] = {}


def _module(scratch: Path):
    """A fresh copy of tiny BERT classification artifacts (exported once per run) and its Module."""
    import shutil

    from turbotrain import export_training_artifacts, ondevice

    if "dir" not in _ARTIFACTS:
        from tests import tiny_models

        model = tiny_models.make("bert", task="cls", dropout=False, num_labels=2)
        _ARTIFACTS["dir"] = export_training_artifacts(
            model, scratch.parent / "artifacts", trainable=["classifier."]
        ).directory
    shutil.copytree(_ARTIFACTS["dir"], scratch / "artifacts")
    return ondevice.Module(scratch / "artifacts")


def _batch(size=2, length=7, **changes):
    rng = np.random.default_rng(0)
    batch = {
        "input_ids": rng.integers(3, 97, (size, length)),
        "attention_mask": np.ones((size, length), np.int64),
        "labels": rng.integers(0, 2, (size,)),
    }
    return {**batch, **changes}


def _bad_batch(change: Callable[[dict], dict], pattern: str):
    def run(scratch: Path):
        module = _module(scratch)
        return raises_clearly(lambda: module.train_step(change(_batch())), pattern)

    return run


def _learning_rate(value: float):
    def run(scratch: Path):
        from turbotrain import ondevice

        module = _module(scratch)
        saved = (module.directory / "checkpoint.safetensors").read_bytes()
        optimizer = ondevice.AdamW(module)
        refused = raises_clearly(lambda: optimizer.set_learning_rate(value), "learning rate")
        if refused[0] != WRONG:
            return refused
        module.train_step(_batch())
        optimizer.step()
        with contextlib.suppress(Exception):
            module.save_checkpoint()
        if (module.directory / "checkpoint.safetensors").read_bytes() != saved:
            finite = all(np.isfinite(p).all() for p in module.params.values())
            return (LOST if not finite else WRONG), "the checkpoint was overwritten" + ("" if finite else " with NaN")
        return WRONG, "accepted (the save was refused)"

    return run


def _save_nan(scratch: Path):
    module = _module(scratch)
    path = module.directory / "checkpoint.safetensors"
    saved = path.read_bytes()
    name = module.manifest.trainable[0]
    module.params[name] = np.full_like(module.params[name], np.nan)
    outcome = raises_clearly(module.save_checkpoint, "NaN")
    return (LOST, "NaN weights written over the checkpoint") if path.read_bytes() != saved else outcome


def _manifest(text: Callable[[dict], str], pattern: str):
    def run(scratch: Path):
        from turbotrain import ondevice

        _module(scratch)
        path = scratch / "artifacts" / "manifest.json"
        path.write_text(text(json.loads(path.read_text())))
        return raises_clearly(lambda: ondevice.Module(scratch / "artifacts"), pattern)

    return run


def ondevice_probes() -> list[Probe]:
    ids = lambda b: b["input_ids"]  # noqa: E731
    bad = {
        "negative token id (-100)": (
            lambda b: {**b, "input_ids": np.where(ids(b) == ids(b)[0, 0], -100, ids(b))},
            r"outside \[0, 97\)",
        ),
        "token id past the vocabulary": (lambda b: {**b, "input_ids": ids(b) + 97}, r"outside \[0, 97\)"),
        "float token ids": (lambda b: {**b, "input_ids": ids(b) + 0.5}, "integers"),
        "label out of range": (lambda b: {**b, "labels": b["labels"] + 5}, r"outside \[0, 2\)"),
        "sequence longer than the positions": (lambda b: _batch(length=129), "positions"),
        "mask and ids of other lengths": (lambda b: {**b, "attention_mask": b["attention_mask"][:, :-1]}, "disagree"),
        "labels for another batch size": (lambda b: {**b, "labels": np.zeros(3, np.int64)}, "disagree"),
        "missing labels": (lambda b: {k: v for k, v in b.items() if k != "labels"}, "lacks 'labels'"),
    }
    probes = [
        Probe("ondevice", f"batch: {name}", CLEAR, _bad_batch(change, pattern))
        for name, (change, pattern) in bad.items()
    ]
    probes += [
        Probe("ondevice", f"learning rate {value}", CLEAR, _learning_rate(value))
        for value in (math.nan, math.inf, -1e-3)
    ]
    probes += [
        Probe("ondevice", "save_checkpoint with NaN weights", CLEAR, _save_nan),
        Probe("ondevice", "garbage manifest.json", CLEAR, _manifest(lambda d: "{oops", "manifest.json")),
        Probe(
            "ondevice",
            "manifest.json without 'trainable'",
            CLEAR,
            _manifest(
                lambda d: json.dumps({k: v for k, v in d.items() if k != "trainable"}), "manifest.json.*trainable"
            ),
        ),
    ]
    return probes


# ---------------------------------------------------------------- arguments and passes (in process)


def _args(**kwargs):
    def run(scratch: Path):
        from turbotrain import TurboTrainingArguments

        return raises_clearly(
            lambda: TurboTrainingArguments(output_dir=str(scratch), report_to="none", **kwargs), "|".join(kwargs)
        )

    return run


def _unknown_backend_option(scratch: Path):
    from tests.trainer_helpers import turbo_trainer

    return raises_clearly(
        lambda: turbo_trainer("bert", scratch, backend="eager", backend_options={"providerz": ["CPU"]}), "providerz"
    )


def _token_classification_packs(family: str):
    def run(scratch: Path):
        import warnings

        from tests import tiny_models

        from turbotrain import optimize

        with warnings.catch_warnings(record=True):
            report = optimize(tiny_models.make(family, task="tok"), label_sparsity=False)
        return (RIGHT, "padding-free applied") if report.padding_free is not None else (WRONG, "stayed padded")

    return run


def args_probes() -> list[Probe]:
    values = {
        "max_tokens_per_batch='100'": {"max_tokens_per_batch": "100"},
        "max_tokens_per_batch=2.5": {"max_tokens_per_batch": 2.5},
        "max_tokens_per_batch=True": {"max_tokens_per_batch": True},
        "max_tokens_per_batch=0": {"max_tokens_per_batch": 0},
        "backend='tpu'": {"backend": "tpu"},
        "label_sparsity='yes'": {"label_sparsity": "yes"},
    }
    probes = [Probe("args", name, CLEAR, _args(**kwargs)) for name, kwargs in values.items()]
    probes.append(
        Probe("args", "unknown backend_options key for eager (issue 12, the lead's)", CLEAR, _unknown_backend_option)
    )
    probes += [
        Probe("passes", f"padding-free on {family} token classification", RIGHT, _token_classification_packs(family))
        for family in ("bert", "gpt2")
    ]
    return probes
