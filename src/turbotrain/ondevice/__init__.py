"""On-device fine-tuning with ONNX Runtime and numpy only: this package never imports torch.

    from turbotrain import ondevice
    module = ondevice.Module("artifacts/")            # training + eval graphs, checkpoint
    optimizer = ondevice.AdamW(module)
    for batch in batches:                              # dicts of numpy arrays
        loss = module.train_step(batch)
        optimizer.step()
    module.save_checkpoint()
    ondevice.export_model_for_inferencing(module, "model.onnx")

The artifacts come from `turbotrain.export_training_artifacts` (run where torch is installed).
"""

from turbotrain.ondevice.checkpoint import Checkpoint
from turbotrain.ondevice.inference import export_model_for_inferencing
from turbotrain.ondevice.manifest import Manifest
from turbotrain.ondevice.module import Module
from turbotrain.ondevice.optimizer import AdamW

__all__ = ["AdamW", "Checkpoint", "Manifest", "Module", "export_model_for_inferencing"]
