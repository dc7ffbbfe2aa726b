"""Runs in its own process (4 simulated CPU devices; importing torchax changes torch's device registry
for the whole process): stock Trainer vs TurboTrainer(backend="xla") on tiny RoBERTa MLM and GPT-2.

    python -m tests.backends.xla.xla_worker OUT_DIR

Writes OUT_DIR/results.json: per family the losses of stock, xla on 4 devices and xla on 1 device
(same global batch of 8), the max |logits| difference between the xla-trained model saved with
save_model and reloaded by stock Transformers and the stock-trained model, the loss and gradient gaps
of the compiled forward/backward against eager on an odd-shaped batch, the tie of GPT-2's head;
for GPT-2 also gradient accumulation, evaluation and a resume from the xla run's checkpoint.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"

import json
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    Trainer,
    TrainingArguments,
)

from tests.tiny_models import make
from tests.trainer_helpers import SHORT_RUN, RightPaddingCollator, variable_length_dataset
from turbotrain import TurboTrainer, TurboTrainingArguments
from turbotrain.backends.xla.batches import ROWS

GLOBAL_BATCH = 8
COMMON = dict(SHORT_RUN, weight_decay=0.01, warmup_steps=2)
# every batch pads to 40 tokens and its kept rows to a quarter of the batch: one compiled shape per run
BUCKETS = {"length_buckets": [40], "label_row_buckets": 4}
PAD = {"roberta": 1, "gpt2": 0}
LOADERS = {"roberta": AutoModelForMaskedLM, "gpt2": AutoModelForCausalLM}


def train(family: str, out: Path, devices: int | None, accumulation: int = 1, resume=None, **overrides):
    per_device = GLOBAL_BATCH // accumulation // (devices or 1)
    common = {
        **COMMON,
        **overrides,
        "per_device_train_batch_size": per_device,
        "gradient_accumulation_steps": accumulation,
    }
    data = variable_length_dataset(n=96, max_len=40)
    eval_data = variable_length_dataset(n=16, max_len=40, seed=1)
    collator = RightPaddingCollator(PAD[family])
    model = make(family, dropout=False)
    if devices is None:
        args = TrainingArguments(output_dir=str(out), **common)
        trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=eval_data, data_collator=collator)
    else:
        args = TurboTrainingArguments(
            output_dir=str(out), backend="xla", backend_options={**BUCKETS, "num_devices": devices}, **common
        )
        trainer = TurboTrainer(
            model=model, args=args, train_dataset=data, eval_dataset=eval_data, data_collator=collator
        )
    trainer.train(resume_from_checkpoint=resume)
    history = trainer.state.log_history
    return trainer, {
        "losses": [h["loss"] for h in history if "loss" in h],
        "steps": [h["step"] for h in history if "loss" in h],
        "eval": [h["eval_loss"] for h in history if "eval_loss" in h],
        "grad_norms": [h["grad_norm"] for h in history if "grad_norm" in h],
        "report": trainer.backend.report() if devices else {},
    }


def probe_batch(family: str) -> dict:
    return RightPaddingCollator(PAD[family])([dict(r) for r in variable_length_dataset(n=4, max_len=40, seed=2)])


def logits_gap(family: str, saved: Path, stock_model) -> float:
    loaded = LOADERS[family].from_pretrained(saved).eval()
    batch = {k: v for k, v in probe_batch(family).items() if k != "labels"}
    with torch.no_grad():
        stock = stock_model.eval()(**batch).logits
        return float((loaded(**batch).logits - stock).abs().max() / stock.abs().max())


def gradient_gap(family: str) -> dict:
    """Loss and every gradient of the compiled step's forward/backward vs eager on an odd-shaped batch
    (3 sequences of 37, 1 and 20 tokens, padded to 4 rows x 64 and spread over 4 devices)."""
    import jax

    from tests.tiny_models import padded_batch
    from turbotrain.backends.xla.batches import BatchLayout, step_arrays
    from turbotrain.backends.xla.mesh import data_parallel_mesh, replicated
    from turbotrain.backends.xla.optimizer import torch_adamw
    from turbotrain.backends.xla.state import split_parameters
    from turbotrain.backends.xla.step import CompiledStep
    from turbotrain.passes.label_sparsity import apply_label_sparsity

    model = make(family, dropout=False).train()
    batch = padded_batch([37, 1, 20], pad_token_id=PAD[family])
    loss = model(**batch).loss
    loss.backward()
    expected = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    # a gradient that is zero in exact arithmetic (attention's key bias) is rounding noise in both:
    # each tensor is judged against its own scale, but no less than 1e-3 of the largest gradient
    floor = 1e-3 * max(float(grad.abs().max()) for grad in expected.values())
    sparsity = apply_label_sparsity(model)
    mesh = data_parallel_mesh(4)
    trainable, frozen = split_parameters(model)
    step = CompiledStep(model, None, torch_adamw(0.9, 0.999, 1e-8, 0.0, {n: True for n in trainable}), mesh, sparsity)
    layout = BatchLayout(rows=4, devices=4, pad_token_id=PAD[family], sparsity_causal=sparsity.head.causal)
    arrays = step.place(step_arrays([batch], layout))
    params, frozen = jax.device_put((trainable, frozen), replicated(mesh))
    with jax.default_matmul_precision("highest"):
        jax_loss, grads = jax.jit(step._grads)(params, frozen, arrays, None, jax.random.key(0))
    gaps = {
        name: float(abs(torch.from_numpy(np.asarray(grads[name])) - grad).max() / max(grad.abs().max(), floor))
        for name, grad in expected.items()
    }
    return {
        "loss_gap": abs(float(jax_loss) - loss.item()) / abs(loss.item()),
        "max_grad_gap": max(gaps.values()),
        "worst": max(gaps, key=gaps.get),
        "parameters": len(gaps),
        "rows": arrays[ROWS].shape[1],
    }


def dropout_losses(family: str) -> list[float]:
    """The compiled loss of one batch with dropout on, under keys k0, k0, k1: a key decides the masks."""
    import jax

    from tests.tiny_models import padded_batch
    from turbotrain.backends.xla.batches import BatchLayout, step_arrays
    from turbotrain.backends.xla.mesh import data_parallel_mesh
    from turbotrain.backends.xla.optimizer import torch_adamw
    from turbotrain.backends.xla.state import split_parameters
    from turbotrain.backends.xla.step import CompiledStep

    model = make(family, dropout=True).train()
    trainable, frozen = split_parameters(model)
    step = CompiledStep(
        model, None, torch_adamw(0.9, 0.999, 1e-8, 0.0, {n: True for n in trainable}), data_parallel_mesh(1)
    )
    arrays = step_arrays(
        [padded_batch([20, 9], pad_token_id=PAD[family])],
        BatchLayout(rows=2, devices=1, pad_token_id=PAD[family]),
    )
    micro = {name: value[0] for name, value in arrays.items()}
    loss = jax.jit(step._micro_loss, static_argnums=5)
    keys = [jax.random.key(0), jax.random.key(0), jax.random.key(1)]
    return [float(loss(trainable, frozen, micro, None, key, 1)) for key in keys]


def family_results(family: str, out: Path) -> dict:
    stock, stock_run = train(family, out / "stock", None, eval_strategy="steps", eval_steps=5)
    four, four_run = train(
        family, out / "xla4", 4, eval_strategy="steps", eval_steps=5, save_strategy="steps", save_steps=5
    )
    _, one_run = train(family, out / "xla1", 1)
    four.save_model(str(out / "saved"))
    result = {
        "stock": stock_run,
        "xla4": four_run,
        "xla1": one_run,
        "logits_gap": logits_gap(family, out / "saved", stock.model),
        "gradients": gradient_gap(family),
    }
    if family == "gpt2":
        loaded = AutoModelForCausalLM.from_pretrained(out / "saved")
        result["tied"] = loaded.lm_head.weight.data_ptr() == loaded.transformer.wte.weight.data_ptr()
        result["dropout_losses"] = dropout_losses(family)
        result["parameters"] = [sum(p.numel() for p in m.parameters()) for m in (loaded, stock.model)]
        _, result["resumed"] = train(family, out / "xla4", 4, resume=str(out / "xla4" / "checkpoint-5"))
        _, result["stock_accumulation"] = train(family, out / "stock_acc", None, accumulation=2)
        _, result["xla_accumulation"] = train(family, out / "xla_acc", 4, accumulation=2)
    return result


def main(out: Path) -> None:
    import jax

    # the resumed run compiles the 4-device run's program again: take it from a cache
    jax.config.update("jax_compilation_cache_dir", str(out / "jax-cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    results = {"devices": jax.device_count()}
    for family in sys.argv[2:] or ("roberta", "gpt2"):
        results[family] = family_results(family, out / family)
    (out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
