"""Export to ONNX: deployment models (`export_onnx`) and on-device training artifacts
(`export_training_artifacts`). Needs the `onnx` extra: pip install 'turbotrain[onnx]'."""

from turbotrain.export.deploy import DeployExport, export_onnx, load_trained_model
from turbotrain.export.onnx_graph import ExportError
from turbotrain.export.training import TrainingArtifacts, export_training_artifacts
from turbotrain.export.verify import Verification, VerificationError

__all__ = [
    "DeployExport",
    "ExportError",
    "TrainingArtifacts",
    "Verification",
    "VerificationError",
    "export_onnx",
    "export_training_artifacts",
    "load_trained_model",
]
