"""`turbotrain export MODEL_DIR OUT_DIR`: load a saved model, export it, print the verification.

An OUT_DIR holding an earlier export (`*.onnx`) is refused before anything is loaded unless `--overwrite`
(`EXPORT_RUN`, utils/run_folder.py); then the export replaces it whole once verified (staging.py)."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console

from turbotrain.export.deploy import DeployExport, export_onnx, load_trained_model
from turbotrain.export.staging import check_target
from turbotrain.export.verify import VerificationError
from turbotrain.utils.run_folder import RunFolder

EXPORT_RUN = RunFolder(
    what="an export",
    marks=("*.onnx",),
    folder_flag="OUT_DIR",
    replaces="the new export replaces the folder whole once it is verified",
)


def print_export(console: Console, result: DeployExport) -> None:
    console.print(f"exported {result.task} model to {result.out_dir}")
    for variant, path in result.files.items():
        size = Path(path).stat().st_size / 1e6
        verification = result.verifications.get(variant)
        check = verification.summary().split(": ", 1)[1] if verification else "not verified"
        console.print(f"  {Path(path).name:<22} {size:8.1f} MB  {check}")


def run_export(
    model_dir: str,
    out_dir: str,
    optimize: bool = False,
    quantize: tuple[str, ...] = (),
    verify: bool = True,
    tolerance: float | None = None,
    console: Console | None = None,
    overwrite: bool = False,
) -> int:
    if tolerance is not None and not (math.isfinite(tolerance) and tolerance >= 0):  # 0: bit for bit
        raise ValueError(f"--tolerance must be a finite number >= 0 (the largest accepted difference), got {tolerance}")
    console = console or Console()
    check_target(out_dir)  # refuse a folder the export may not replace before loading anything
    replacing = EXPORT_RUN.claim(out_dir, overwrite)  # and an earlier export, unless --overwrite
    if replacing:
        console.print(replacing, soft_wrap=True)  # one line, however long
    with console.status(f"Loading {model_dir}..."):
        model = load_trained_model(model_dir)
    try:
        with console.status("Exporting to ONNX and checking against torch..."):
            result = export_onnx(
                model,
                out_dir,
                optimize=optimize,
                quantize=quantize,
                verify=verify,
                tolerances={"fp32": tolerance} if tolerance is not None else None,
                tokenizer_from=model_dir,
            )
    except VerificationError as error:
        console.print(f"[red]turbotrain export: {error}[/]")
        console.print(f"nothing was written to {out_dir}")
        return 1
    if result.tokenizer:
        console.print(f"tokenizer saved beside the model in {out_dir}")
    print_export(console, result)
    return 0
