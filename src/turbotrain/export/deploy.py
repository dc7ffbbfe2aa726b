"""Deployment export: a trained Transformers model -> verified ONNX files for ONNX Runtime.

`export_onnx(model, out_dir)` writes `model.onnx` (fp32, dynamic batch and sequence axes, inputs
`input_ids` and `attention_mask`, output `logits`), and on request:

- `model.optimized.onnx`: ONNX Runtime's transformer optimizer (attention, LayerNorm, GELU fusions);
- `model.fp16.onnx`: the optimized graph in float16 with float32 inputs and outputs kept;
- `model.int8.onnx`: ONNX Runtime's dynamic int8 quantization of the weights of MatMul/Gemm.

Every file written is verified against torch on fresh inputs of several shapes (`verify.py`); a file
whose logits differ by more than its tolerance raises `VerificationError` (fp32 graphs are exact to
rounding; fp16 and int8 are approximations, so their tolerances are looser and stated). The files
(with the model's config.json, and its tokenizer on request) are written into a temporary folder and
moved into `out_dir` only when all of them pass (`staging.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from turbotrain.export.onnx_graph import export_module, save_onnx
from turbotrain.export.staging import check_target, staged
from turbotrain.export.task_outputs import DYNAMIC_AXES, INPUT_NAMES, LogitsModule, exported_task, sample_inputs
from turbotrain.export.verify import Verification, VerificationError, verify_onnx
from turbotrain.modeling import max_positions
from turbotrain.utils.imports import require

# Largest |ORT - torch| of the logits accepted per variant.
TOLERANCES = {"fp32": 1e-4, "optimized": 1e-4, "fp16": 5e-2, "int8": 0.5}
QUANTIZATIONS = ("fp16", "int8")
ORT_MODEL_TYPES = {"gpt2": "gpt2", "bart": "bart", "t5": "t5"}  # everything else: the BERT-style fusions


@dataclass
class DeployExport:
    out_dir: Path
    task: str
    files: dict[str, Path] = field(default_factory=dict)
    verifications: dict[str, Verification] = field(default_factory=dict)
    tokenizer: bool = False  # a tokenizer was saved beside the model

    def moved_to(self, out_dir: Path) -> DeployExport:
        """The same export, its paths in `out_dir` (where the staged folder was moved)."""
        files = {v: out_dir / p.name for v, p in self.files.items()}
        verifications = {v: replace(c, path=str(out_dir / Path(c.path).name)) for v, c in self.verifications.items()}
        return replace(self, out_dir=out_dir, files=files, verifications=verifications)


def _optimize(source: Path, target: Path, model: torch.nn.Module, fp16: Path | None) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    model_type = ORT_MODEL_TYPES.get(model.config.model_type, "bert")
    optimized = optimize_model(str(source), model_type=model_type, num_heads=0, hidden_size=0, opt_level=1)
    optimized.save_model_to_file(str(target))
    if fp16 is not None:
        optimized.convert_float_to_float16(keep_io_types=True)
        optimized.save_model_to_file(str(fp16))


def _quantize_int8(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)


def export_onnx(
    model: torch.nn.Module,
    out_dir: str | Path,
    optimize: bool = False,
    quantize: tuple[str, ...] = (),
    verify: bool = True,
    tolerances: dict[str, float] | None = None,
    tokenizer_from: str | Path | None = None,
) -> DeployExport:
    """Export `model` for deployment into `out_dir`; see the module docstring for the files and checks.

    Everything is written into a temporary folder beside `out_dir`, which replaces `out_dir` only once
    every file is written and verified (staging.py); `out_dir` must be new, empty or an earlier export.
    `tokenizer_from`: a model directory whose tokenizer is saved beside the model."""
    require("onnxruntime", "ONNX export")
    unknown = set(quantize) - set(QUANTIZATIONS)
    if unknown:
        raise ValueError(f"unknown quantization {sorted(unknown)}; choose from {list(QUANTIZATIONS)}")
    with staged(out_dir) as folder:
        result = _export_into(model, folder, optimize, quantize, verify, tolerances)
        model.config.save_pretrained(str(folder))
        result.tokenizer = tokenizer_from is not None and copy_tokenizer(tokenizer_from, folder)
    return result.moved_to(check_target(out_dir))


def _export_into(
    model: torch.nn.Module,
    out_dir: Path,
    optimize: bool,
    quantize: tuple[str, ...],
    verify: bool,
    tolerances: dict[str, float] | None,
) -> DeployExport:
    model = model.eval().float()
    task = exported_task(model)
    result = DeployExport(out_dir, task.name)
    inputs = sample_inputs(model, batch=2, length=16)
    proto = export_module(
        LogitsModule(model),
        inputs,
        INPUT_NAMES,
        ["logits"],
        {**DYNAMIC_AXES},
        max_sizes={"sequence": max_positions(model)},
    )
    result.files["fp32"] = save_onnx(proto, out_dir / "model.onnx")
    if optimize or "fp16" in quantize:
        result.files["optimized"] = out_dir / "model.optimized.onnx"
        fp16 = out_dir / "model.fp16.onnx" if "fp16" in quantize else None
        _optimize(result.files["fp32"], result.files["optimized"], model, fp16)
        if fp16 is not None:
            result.files["fp16"] = fp16
    if "int8" in quantize:
        result.files["int8"] = out_dir / "model.int8.onnx"
        _quantize_int8(result.files["fp32"], result.files["int8"])
    if verify:
        limits = {**TOLERANCES, **(tolerances or {})}
        for variant, path in result.files.items():
            result.verifications[variant] = verify_onnx(model, str(path), limits[variant])
        failed = [v.summary() for v in result.verifications.values() if not v.ok]
        if failed:
            raise VerificationError("exported ONNX does not match torch:\n" + "\n".join(failed))
    return result


def load_trained_model(model_dir: str | Path) -> torch.nn.Module:
    """A `save_pretrained` directory -> the model class named in its config (no downloads)."""
    import transformers

    folder = Path(model_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"model directory {model_dir} does not exist (expected a save_pretrained folder)")
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir} has no config.json: not a save_pretrained model directory")
    config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
    architectures = getattr(config, "architectures", None) or []
    if not architectures or not hasattr(transformers, architectures[0]):
        raise ValueError(f"{model_dir}: config.json names no Transformers architecture to load")
    try:
        return getattr(transformers, architectures[0]).from_pretrained(str(folder), local_files_only=True)
    except Exception as error:  # safetensors and torch raise their own types for cut-off or damaged weights
        weights = sorted(p.name for p in folder.glob("*.safetensors")) or sorted(p.name for p in folder.glob("*.bin"))
        raise ValueError(
            f"the weights in {model_dir} ({', '.join(weights) or 'none found'}) cannot be read: "
            f"{str(error).splitlines()[0] if str(error) else type(error).__name__}; "
            "save the model again (save_pretrained)"
        ) from None


def copy_tokenizer(model_dir: str | Path, out_dir: str | Path) -> bool:
    """Save the model directory's tokenizer beside the ONNX files, when it has one."""
    import transformers

    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except (OSError, ValueError, KeyError):
        return False
    tokenizer.save_pretrained(str(out_dir))
    return True
