"""The GPU check's parity part: every pass and backend against stock on the device, in fp32 and bf16, and the
host-sync audit of turbotrain's steps. Used by scripts/gpu_check.py (read its docstring first).

Parity: one training-mode step (forward under the dtype's autocast, backward) of a small model built from a
config, stock and rewritten from the same weights on the same batch; reported: the loss's relative
difference and the largest gradient difference relative to that gradient's scale, and whether every
gradient is finite. Passes within 1e-4 (fp32, TF32 off) or 5e-2 (bf16 autocast). The scored-call rows do the
same for TRL's per-row log-prob call (`fused_lm_head=True`) packed inside the call against the padded call, and
fail unless the call was packed (one packed row of the batch's real tokens): on CUDA this runs the varlen kernel,
GQA included (attention_kernels.torch_varlen_takes decides whether the kernel takes GQA on this torch).

Host syncs: each pass's step (batch already on the device, fused AdamW step included) runs once to warm up,
then once per phase (forward, backward, optimizer) with `torch.cuda.set_sync_debug_mode("warn")`, recording
where each synchronizing call came from, stock's step alike; then whole under `set_sync_debug_mode("error")`.
Passes when no sync comes from turbotrain's own files, the backward and the optimizer step sync no more
often than stock's (their syncs are replayed from the autograd threads without their own place), and the
error mode's first sync, if any, is not in turbotrain (a sync in Transformers' mask code is stock's too).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from scripts.gpu_check_bench import PadCollator, Sizes, common_arguments
from transformers import Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback

from turbotrain import TurboTrainer, TurboTrainingArguments, optimize
from turbotrain.backends import BackendUnavailable
from turbotrain.passes.embedding_grad import apply_embedding_grad
from turbotrain.passes.fused_optimizer import fused_adamw
from turbotrain.passes.registry import StepPlace, TrainerFacts
from turbotrain.passes.self_check import RunPrecision, run_precision

ROOT = Path(__file__).resolve().parents[1]

MIN_CHILD_S = 30.0  # a child process with less time than this left is skipped, not started to be cut off
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2}
VOCAB_LARGE = 151_936  # Qwen2's: where the chunked head matters
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


def tiny_model(kind: str, seed: int = 0):
    """A small randomly initialised model of `kind` (no download); dropout off so stock and rewritten agree."""
    import transformers as tf

    torch.manual_seed(seed)
    if kind == "llama":  # GQA, untied head
        config = tf.LlamaConfig(
            vocab_size=1000, num_key_value_heads=2, tie_word_embeddings=False, pad_token_id=0, **SMALL
        )
        return tf.LlamaForCausalLM(config)
    if kind == "qwen2-152k":  # tied head over Qwen2's vocabulary
        config = tf.Qwen2Config(vocab_size=VOCAB_LARGE, num_key_value_heads=2, pad_token_id=0, **SMALL)
        return tf.Qwen2ForCausalLM(config)
    if kind == "roberta":  # encoder masked LM, tied head, positions from padding_idx + 1
        config = tf.RobertaConfig(
            vocab_size=1000, max_position_embeddings=256, pad_token_id=1, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, **SMALL,
        )  # fmt: skip
        return tf.RobertaForMaskedLM(config)
    if kind == "gpt2":  # gelu_new: the fused activation's case
        config = tf.GPT2Config(
            vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=256, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, pad_token_id=0, bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
        return tf.GPT2LMHeadModel(config)
    raise ValueError(kind)


def padded_batch(model, lengths=(37, 5, 20), keep=0.3, seed=1) -> dict:
    """Right-padded input_ids / attention_mask / labels (`keep` of the labels kept) for `model`."""
    generator = torch.Generator().manual_seed(seed)
    vocab, pad = model.config.vocab_size, model.config.pad_token_id
    longest = max(lengths)
    mask = torch.arange(longest)[None, :] < torch.tensor(lengths)[:, None]
    input_ids = torch.randint(3, vocab, (len(lengths), longest), generator=generator).masked_fill(~mask, pad)
    labels = input_ids.masked_fill(~mask | (torch.rand(mask.shape, generator=generator) >= keep), -100)
    return {"input_ids": input_ids, "attention_mask": mask.long(), "labels": labels}


@dataclass
class Case:
    """One pass on one model: how to rewrite it and how its batches are made (packing, host rows)."""

    name: str
    model: str
    options: dict
    embedding_on_accelerators: bool = False


CASES = [
    Case("label_sparsity", "roberta", dict(padding_free=False, embedding_grad=False, chunked_cross_entropy="never")),
    Case("label_sparsity", "llama", dict(padding_free=False, embedding_grad=False, chunked_cross_entropy="never")),
    Case("chunked_ce", "qwen2-152k", dict(padding_free=False, embedding_grad=False, chunked_cross_entropy="always")),
    Case("padding_free", "llama", dict(label_sparsity=False, embedding_grad=False)),
    Case("padding_free", "roberta", dict(label_sparsity=False, embedding_grad=False)),
    Case("embedding_grad", "llama", dict(label_sparsity=False, padding_free=False, embedding_grad=False), True),
    Case("embedding_grad", "roberta", dict(label_sparsity=False, padding_free=False, embedding_grad=False), True),
    Case("fused_activation", "gpt2", dict(label_sparsity=False, padding_free=False, embedding_grad=False)),
    Case("lean_gated_mlp", "llama", dict(label_sparsity=False, padding_free=False, embedding_grad=False)),
    Case("all (defaults)", "qwen2-152k", dict(chunked_cross_entropy="always")),
    Case("all (defaults)", "llama", dict()),
]


def autocast(device: torch.device, dtype: torch.dtype):
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def rewritten(case: Case, stock, device: torch.device, dtype: torch.dtype):
    """(rewritten copy of `stock`, its batch maker: padded batch -> the batch the trainer would feed it)."""
    model = copy.deepcopy(stock)
    with run_precision(RunPrecision(device.type, None if dtype == torch.float32 else dtype)):
        report = optimize(model, **case.options)
    if case.embedding_on_accelerators:
        apply_embedding_grad(model, on_accelerators=True)

    def feed(padded: dict) -> dict:
        collator = report.collator(lambda features: {k: v.clone() for k, v in padded.items()}, StepPlace(device))
        return {k: v.to(device) if hasattr(v, "to") else v for k, v in collator(None).items()}

    return model, feed, report


def one_step(model, batch: dict, device: torch.device, dtype: torch.dtype):
    model.train()
    model.zero_grad(set_to_none=True)
    with autocast(device, dtype):
        loss = model(**batch).loss
    loss.backward()
    grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach().float(), grads


def differences(expected, got, dtype: torch.dtype = torch.float32) -> tuple[float, float, bool]:
    """(loss relative difference, largest gradient difference relative to its tensor's scale, all finite).

    A tensor's scale is floored at the largest gradient in the model times the run's rounding unit (1e-6 in fp32,
    bf16's epsilon 2^-7 under bf16): gradients that are zero in exact arithmetic (attention key biases: softmax
    ignores a constant shift) hold only rounding noise, which in bf16 differs between any two kernels by up to
    ~1x their own size (seen: RoBERTa's key-bias gradients of 4e-8, 1e-6 of the largest, 0.1-1.0 apart)."""
    (loss_a, grads_a), (loss_b, grads_b) = expected, got
    loss_rel = abs(float(loss_a) - float(loss_b)) / max(abs(float(loss_a)), 1e-12)
    unit = 1e-6 if dtype == torch.float32 else torch.finfo(dtype).eps
    floor = unit * max((float(a.abs().max()) for a in grads_a.values()), default=1.0)
    grad_rel = 0.0
    for name, a in grads_a.items():
        b = grads_b.get(name)
        if b is None:
            grad_rel = float("inf") if a.abs().max() > floor else grad_rel
            continue
        grad_rel = max(grad_rel, float((a - b).abs().max()) / max(float(a.abs().max()), floor))
    finite = all(bool(torch.isfinite(g).all()) for g in grads_b.values()) and bool(torch.isfinite(loss_b))
    return loss_rel, grad_rel, finite


def pass_parity(device: torch.device, dtypes) -> list[dict]:
    """One row per (case, dtype): loss and gradient differences from stock, finite gradients, verdict."""
    rows = []
    for case in CASES:
        for dtype in dtypes:
            rows.append(_parity_row(case, device, dtype))
    rows.append(_optimizer_row(device))
    rows += [_scored_call_row(kind, device, dtype) for kind in SCORED_CALL_MODELS for dtype in dtypes]
    return rows


def _parity_row(case: Case, device: torch.device, dtype: torch.dtype) -> dict:
    row = {"check": f"{case.name} / {case.model}", "dtype": str(dtype).removeprefix("torch.")}
    try:
        stock = tiny_model(case.model).to(device)
        model, feed, report = rewritten(case, stock, device, dtype)
        applied = report.applied + (["embedding_grad"] if case.embedding_on_accelerators else [])
        padded = padded_batch(stock)
        expected = one_step(stock, {k: v.to(device) for k, v in padded.items()}, device, dtype)
        got = one_step(model, feed(padded), device, dtype)
        loss_rel, grad_rel, finite = differences(expected, got, dtype)
    except Exception as error:  # a row that breaks is reported, the check goes on
        return {**row, "result": "ERROR", "note": _one_line(error)}
    return verdict(row, dtype, (loss_rel, grad_rel, finite), "applied: " + (", ".join(applied) or "none"))


def verdict(row: dict, dtype: torch.dtype, measured: tuple[float, float, bool], note: str) -> dict:
    """`row` with its differences (`differences()`'s answer) and PASS or FAIL against the dtype's tolerance."""
    loss_rel, grad_rel, finite = measured
    ok = finite and loss_rel <= TOLERANCE[dtype] and grad_rel <= TOLERANCE[dtype]
    return {
        **row,
        "loss rel. diff": f"{loss_rel:.2e}",
        "max grad rel. diff": f"{grad_rel:.2e}",
        "finite": "yes" if finite else "NO",
        "result": "PASS" if ok else "FAIL",
        "note": note,
    }


def _optimizer_row(device: torch.device) -> dict:
    """The fused AdamW against the for-loop AdamW: parameters after three steps (fp32)."""
    row = {"check": "fused_optimizer / llama", "dtype": "float32"}
    models = [tiny_model("llama").to(device) for _ in range(2)]
    optimizers = [
        torch.optim.AdamW(models[0].parameters(), lr=1e-3, foreach=False),
        fused_adamw(models[1].parameters(), lr=1e-3),
    ]
    batch = {k: v.to(device) for k, v in padded_batch(models[0]).items()}
    for _ in range(3):
        for model, optimizer in zip(models, optimizers):
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    worst = max(
        float((a - b).abs().max()) / max(float(a.abs().max()), 1e-12)
        for a, b in zip(models[0].parameters(), models[1].parameters())
    )
    ok = worst <= 1e-5
    return {**row, "max grad rel. diff": f"{worst:.2e} (params)", "result": "PASS" if ok else "FAIL", "note": ""}


SCORED_CALL_MODELS = ("llama", "qwen2-152k")  # GQA 2:1 (the varlen kernel's enable_gqa rule), the 152k head
ANSWERED = dict(embedding_grad=False, fused_activation=False, chunked_cross_entropy="always")
# what DPOTrainer's row of the TRL table gives the passes (integrations/trl/): per-row fused calls, packable
SCORED_CALLS = TrainerFacts(sums_tokens=False, fused_call_weighting="per_row", packs_scored_calls=True)


def _scored_call_row(kind: str, device: torch.device, dtype: torch.dtype) -> dict:
    """TRL's scored call (`fused_lm_head=True`, as DPO, KTO, GRPO and RLOO make it) answered by label sparsity,
    padded against packed inside the call (passes/padding_free/scored_calls.py): the per-row log-probs and
    every gradient of a DPO-like weighted sum, on a right-padded uneven batch."""
    row = {"check": f"padding_free (scored calls) / {kind}", "dtype": str(dtype).removeprefix("torch.")}
    try:
        stock = tiny_model(kind).to(device)
        packed = copy.deepcopy(stock)
        with run_precision(RunPrecision(device.type, None if dtype == torch.float32 else dtype)):
            optimize(stock, padding_free=False, facts=SCORED_CALLS, **ANSWERED)
            report = optimize(packed, padding_free=True, facts=SCORED_CALLS, **ANSWERED)
        if report.padding_free is None:
            return {**row, "result": "FAIL", "note": f"not packed: {report.skipped or report.not_applicable}"}
        batch = {k: v.to(device) for k, v in padded_batch(stock).items()}
        tokens = _count_packed_tokens(report.padding_free)
        expected, got = _scored_call(stock, batch, device, dtype), _scored_call(packed, batch, device, dtype)
        loss_rel, grad_rel, finite = differences(expected, got, dtype)
    except Exception as error:  # a row that breaks is reported, the check goes on
        return {**row, "result": "ERROR", "note": _one_line(error)}
    real = int(batch["attention_mask"].sum())
    if tokens != [real]:
        return {**row, "result": "FAIL", "note": f"packed calls' tokens {tokens}, expected one call of {real}"}
    return verdict(row, dtype, (loss_rel, grad_rel, finite), "weighted sum of per-row log-probs")


def _count_packed_tokens(packer) -> list:
    """Each call's packed token count (None: it stayed padded), as `packer` packs them."""
    tokens, pack = [], packer.pack

    def counted(*args):
        packed = pack(*args)
        tokens.append(None if packed is None else packed[2])
        return packed

    packer.pack = counted
    return tokens


def _scored_call(model, batch: dict, device: torch.device, dtype: torch.dtype):
    model.train()
    model.zero_grad(set_to_none=True)
    with autocast(device, dtype):
        out = model(**batch, use_cache=False, fused_lm_head=True)
    weights = torch.linspace(0.5, 2.0, out.log_probs.shape[0], device=device)[:, None]  # DPO's factor per row
    loss = (out.log_probs.float() * weights).sum()
    loss.backward()
    grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


# --- host syncs ---------------------------------------------------------------------------------------------

SYNC_CASES = [case for case in CASES if case.name != "fused_activation"]


def _train_step(model, batch, optimizer, device, dtype):
    with autocast(device, dtype):
        loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _sync_sites(step) -> list[str]:
    """file:line of every synchronizing CUDA call `step()` made, from `set_sync_debug_mode("warn")`.

    Calls made on the autograd engine's threads are replayed to the caller at the end of the backward, so they
    carry the backward call's place, not their own: the backward is audited by count against stock's."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return [f"{w.filename}:{w.lineno}" for w in caught if "synchroniz" in str(w.message).lower()]


def _phase_sites(model, batch, optimizer, device, dtype) -> dict[str, list[str]]:
    """Sync sites of one training step, per phase: forward, backward, optimizer step."""
    held = {}

    def forward():
        with autocast(device, dtype):
            held["loss"] = model(**batch).loss

    def step():
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return {
        "forward": _sync_sites(forward),
        "backward": _sync_sites(lambda: held["loss"].backward()),
        "optimizer": _sync_sites(step),
    }


def _error_mode(step) -> str:
    """'no sync', or where the first sync was raised (the innermost frame of the traceback)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    except RuntimeError as error:
        frames = traceback.extract_tb(error.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
        return f"sync at {where}"
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return "no sync"


def host_sync_audit(device: torch.device) -> list[dict]:
    if device.type != "cuda":
        return [{"check": "host syncs", "result": "skipped", "note": "needs CUDA (set_sync_debug_mode)"}]
    return [_sync_row(case, device, torch.bfloat16) for case in SYNC_CASES]


def _counts(sites: dict[str, list[str]]) -> str:
    return "/".join(str(len(sites[phase])) for phase in ("forward", "backward", "optimizer"))


def _sync_row(case: Case, device: torch.device, dtype: torch.dtype) -> dict:
    row = {"check": f"host syncs: {case.name} / {case.model}", "dtype": "bfloat16"}
    try:
        stock = tiny_model(case.model).to(device)
        model, feed, _ = rewritten(case, stock, device, dtype)
        padded = padded_batch(stock)
        runs = [
            (stock, {k: v.to(device) for k, v in padded.items()}, fused_adamw(stock.parameters(), lr=1e-4)),
            (model, feed(padded), fused_adamw(model.parameters(), lr=1e-4)),
        ]
        for m, b, o in runs:
            _train_step(m, b, o, device, dtype)  # warm-up: lazy initialisation (cuBLAS, AdamW state) syncs once
        stock_sites, turbo_sites = (_phase_sites(m, b, o, device, dtype) for m, b, o in runs)
        ours = sorted({site for sites in turbo_sites.values() for site in sites if "/turbotrain/" in site})
        strict = _error_mode(lambda: _train_step(*runs[1], device, dtype))
    except Exception as error:
        return {**row, "result": "ERROR", "note": _one_line(error)}
    more = [p for p in ("backward", "optimizer") if len(turbo_sites[p]) > len(stock_sites[p])]
    ok = not ours and not more and "/turbotrain/" not in strict
    note = (
        f"syncs forward/backward/optimizer: stock {_counts(stock_sites)}, turbo {_counts(turbo_sites)}; "
        f"error mode: {strict}"
    )
    if ours:
        note += "; from turbotrain: " + ", ".join(ours)
    if more:
        note += "; more than stock in: " + ", ".join(more)
    return {**row, "result": "PASS" if ok else "FAIL", "note": note}


# --- backends -------------------------------------------------------------------------------------------------


def backend_parity(device: torch.device, quick: bool, xla_timeout_s: float = 240.0) -> list[dict]:
    """eager vs inductor and onnxruntime (one step each, fp32 and bf16), xla (three Trainer steps, in a process of
    its own given `xla_timeout_s`), the refusals."""
    import turbotrain

    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        if quick:
            rows.append({"check": "backend inductor / llama", "dtype": str(dtype)[6:], "result": "skipped",
                         "note": "--quick: inductor's C++ compile is tested in tests/backends"})  # fmt: skip
            break
        rows.append(_compiled_row("inductor", {}, device, dtype, turbotrain))
    rows.append(_onnxruntime_row(device, quick, turbotrain))
    rows.append(_xla_row(device, quick, xla_timeout_s))
    return rows


def _compiled_row(backend: str, options: dict, device: torch.device, dtype: torch.dtype, turbotrain) -> dict:
    row = {"check": f"backend {backend} / llama", "dtype": str(dtype).removeprefix("torch.")}
    try:
        stock = tiny_model("llama").to(device)
        model = copy.deepcopy(stock)
        optimize(model, padding_free=False, embedding_grad=False)
        turbotrain.compile(model, backend=backend, backend_options=options)
        batch = {k: v.to(device) for k, v in padded_batch(stock).items()}
        expected = one_step(stock, batch, device, dtype)
        start = time.perf_counter()
        got = one_step(model, batch, device, dtype)
        first_s = time.perf_counter() - start
        loss_rel, grad_rel, finite = differences(expected, got, dtype)
    except BackendUnavailable as why:
        return {**row, "result": "refused", "note": _one_line(why)}
    except Exception as error:
        return {**row, "result": "ERROR", "note": _one_line(error)}
    ok = finite and loss_rel <= TOLERANCE[dtype] and grad_rel <= TOLERANCE[dtype]
    return {
        **row,
        "loss rel. diff": f"{loss_rel:.2e}",
        "max grad rel. diff": f"{grad_rel:.2e}",
        "finite": "yes" if finite else "NO",
        "result": "PASS" if ok else "FAIL",
        "note": f"first step (compile) {first_s:.1f} s; report {turbotrain.training.compile_module.backend_of(model).report()}",
    }


def _onnxruntime_row(device: torch.device, quick: bool, turbotrain) -> dict:
    """CUDA EP present: parity; absent (the CPU-only wheel): the refusal must name onnxruntime-gpu."""
    import importlib.util

    if importlib.util.find_spec("onnxruntime") is None:
        return {"check": "backend onnxruntime", "result": "skipped", "note": "onnxruntime not installed"}
    import onnxruntime

    from turbotrain.backends.ort_binding import CUDA_PROVIDER

    probe = torch.device("cuda", 0) if device.type == "cpu" else device
    if device.type == "cuda" and CUDA_PROVIDER in onnxruntime.get_available_providers():
        return _compiled_row("onnxruntime", {"cache_dir": None}, device, torch.float32, turbotrain)
    try:
        turbotrain.compile(tiny_model("llama"), backend="onnxruntime", device=probe)
    except BackendUnavailable as why:
        clear = "onnxruntime-gpu" in str(why)
        return {
            "check": f"backend onnxruntime on {probe.type} (providers {onnxruntime.get_available_providers()})",
            "result": "PASS (refused)" if clear else "FAIL",
            "note": _one_line(why),
        }
    return {"check": "backend onnxruntime", "result": "FAIL", "note": "a CUDA model was accepted without CUDA EP"}


def _xla_row(device: torch.device, quick: bool, timeout_s: float = 240.0) -> dict:
    import importlib.util

    row = {"check": "backend xla / gpt2 (3 Trainer steps)", "dtype": "float32"}
    if quick:
        return {**row, "result": "skipped", "note": "--quick: jax compiles are tested in tests/backends/xla"}
    missing = [p for p in ("jax", "torchax", "optax") if importlib.util.find_spec(p) is None]
    if missing:
        return {**row, "result": "skipped", "note": f"not installed: {', '.join(missing)}"}
    if timeout_s < MIN_CHILD_S:
        return {**row, "result": "skipped", "note": f"time budget: {timeout_s:.0f} s left"}
    # its own process: importing torchax registers a PrivateUse1 device for the whole process, which must not
    # change the rows that come after it (on torch 2.11 with CUDA it broke every later Trainer's pinning)
    command = [sys.executable, "-m", "scripts.gpu_check_parity", "xla", device.type]
    paths = [str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {**row, "result": "ERROR", "note": f"timed out after {timeout_s:.0f} s"}
    sys.stderr.write(done.stderr[-6000:])
    if done.returncode != 0:
        return {**row, "result": "ERROR", "note": last_error_line(done.stderr)}
    return {**row, **_judge_xla(*json.loads(done.stdout.strip().splitlines()[-1]))}


def last_error_line(stderr: str) -> str:
    """The last line of a child's stderr that names an error, else its last line."""
    lines = [line for line in stderr.strip().splitlines() if line.strip() and not set(line.strip()) <= set("=-")]
    named = [line for line in lines if "Error" in line or "error" in line]
    return ((named or lines or ["(no output)"])[-1]).replace("|", "/")[:300]


def _xla_losses(device: torch.device) -> tuple[list[float], list[float]]:
    """Stock Trainer's and TurboTrainer-on-xla's losses over three steps (run in a process of its own)."""
    stock = trainer_losses(tiny_model("gpt2"), device, steps=3, backend=None)
    xla = trainer_losses(tiny_model("gpt2"), device, steps=3, backend="xla")
    return stock, xla


def _judge_xla(stock: list[float], xla: list[float]) -> dict:
    worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(stock, xla))
    ok = worst <= 1e-4 and len(stock) == len(xla)
    return {"loss rel. diff": f"{worst:.2e}", "result": "PASS" if ok else "FAIL", "note": f"losses {xla}"}


def trainer_losses(model, device: torch.device, steps: int, backend: str | None) -> list[float]:
    """Per-step losses of `steps` fp32 steps of stock Trainer (backend None) or TurboTrainer on `backend`."""
    data = []
    for seed in range(steps * 4):
        one = padded_batch(model, lengths=(12,), keep=1.0, seed=seed)
        data.append({"input_ids": one["input_ids"][0].tolist(), "labels": one["labels"][0].tolist()})
    with tempfile.TemporaryDirectory() as tmp:
        kw = dict(common_arguments(tmp, Sizes(0, 0, 0, 4, 12, 0, steps), device, False), bf16=False)
        if backend is None:
            trainer = Trainer(
                model=model, args=TrainingArguments(**kw), train_dataset=data, data_collator=PadCollator(0)
            )
        else:
            args = TurboTrainingArguments(**kw, backend=backend)
            trainer = TurboTrainer(model=model, args=args, train_dataset=data, data_collator=PadCollator(0))
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def _one_line(error: BaseException) -> str:
    """The row's note; the whole traceback goes to stderr (the log), so a device run says where it broke."""
    traceback.print_exception(error, file=sys.stderr)
    text = f"{type(error).__name__}: {error}".replace("\n", " ").replace("|", "/")
    return text[:300]


if __name__ == "__main__":  # python -m scripts.gpu_check_parity xla cuda: the xla row's own process
    print(json.dumps(_xla_losses(torch.device(sys.argv[2]))))
