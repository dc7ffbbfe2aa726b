"""xla: the training step compiled by XLA through torchax + jax.jit, spread over every device of every host.

The revival of Transformers' TensorFlow + XLA path for TPUs (removed in Transformers 5), from the same
PyTorch model: torchax runs the model's torch code on jax arrays, `jax.jit` compiles forward, backward
and torch's AdamW update into one program (step.py), and a `jax.sharding.Mesh` splits each batch over
the devices (mesh.py), on one host or on a pod of several (hosts.py: one process per host, started by
the same command on each; each host loads its own rows, host_data.py). Parameters and AdamW moments are
replicated or, with `shard="fsdp"`, split over the devices (sharding.py). The same code runs on TPU,
GPU and CPU, wherever jax has devices.

Trainer's loop is built on `loss.backward()`, so this backend brings its own small step loop
(loop.py) and keeps Trainer's dataloaders, LR schedule, callbacks, logging, evaluation (in torch, on
the trained weights), checkpoints and `save_pretrained` output.

Options (`TurboTrainingArguments(backend="xla", backend_options={...})`, see options.py):
num_devices, length_buckets, label_row_buckets, matmul_precision, shard, host_timeout_s.
Not used with xla (`turns_off`; the trainer turns them off with a log line): padding_free (packed batches change shape every step)
and embedding_grad (a torch autograd hook). Refused with an error: fp16, optimizers other than
AdamW, a custom compute_loss / compute_loss_func / label smoothing, auto_find_batch_size, Trainer
subclasses that override training_step or compute_loss. bf16=True: bf16 autocast, fp32 master weights.
Exact: the same losses as stock Trainer within float rounding (tests: RoBERTa MLM with label sparsity,
GPT-2, 10 steps; 1 and 4 devices, 2 hosts x 2 devices, shard="fsdp"), dropout aside (jax's PRNG draws
different masks); bf16 within 2e-2 of stock bf16 autocast.
Requires the `xla` extra (jax, torchax, optax); torchax 0.0.13 on torch >= 2.13 goes through
torchax_compat.py.
"""

from __future__ import annotations

from transformers import TrainingArguments

from turbotrain.backends.backend_registry import register_backend
from turbotrain.backends.base import EAGER_ONLY_CHUNKED_CE, Backend, BackendUnavailable, refuse_trainer_compile
from turbotrain.backends.xla.options import XlaOptions
from turbotrain.boundaries.hf_boundary import missing_loop_parts
from turbotrain.utils.imports import is_available

PACKAGES = ("jax", "torchax", "optax")
NOT_USED = {
    "padding_free": "packed batches change shape every step",
    "embedding_grad": "a torch autograd hook",
    "chunked_cross_entropy": EAGER_ONLY_CHUNKED_CE,
}


@register_backend
class XlaBackend(Backend):
    name = "xla"

    options_class = XlaOptions
    turns_off = NOT_USED
    owns_loop = True  # Trainer's loop calls loss.backward(): this backend brings its own (loop.py)

    def __init__(self, options: XlaOptions | None = None):
        super().__init__(options)
        self.run = None

    def check_available(self, args: TrainingArguments) -> None:
        from turbotrain.backends.xla.gpu_memory import share_gpu_with_torch

        refuse_trainer_compile(self.name, args)
        share_gpu_with_torch(args.device)  # before jax starts a GPU client beside torch's model
        missing = [package for package in PACKAGES if not is_available(package)]
        if missing:
            raise BackendUnavailable(
                f"backend 'xla' needs {', '.join(missing)}, not installed. "
                "Install them with: pip install 'turbotrain[xla]'"
            )
        missing_parts = missing_loop_parts()
        if missing_parts:
            raise BackendUnavailable(
                f"backend 'xla' reuses parts of Trainer's loop that this Transformers release "
                f"lacks ({', '.join(missing_parts)}); upgrade transformers"
            )

    def training_loop(self, trainer):
        from turbotrain.backends.xla.loop import XlaRun

        self.run = XlaRun(trainer, self.options)
        return self.run.run

    def report(self) -> dict:
        if self.run is None or self.run.step is None:
            return {}
        step = self.run.step
        return {
            "devices": self.run.mesh.size,
            "hosts": self.run.hosts.count,
            "shard": self.options.shard,
            "compiled_shapes": len(step.compiled_shapes),
            "compiles": step.compiles(),
            "label_sparsity": step.used_label_sparsity(),
            **self.run.state_bytes,
        }
