"""The chunked head's choices on CUDA: compute dtype, chunk size, the fp32 weight-gradient sum, and no host sync.

The chunked head's op (chunked_ce/__init__.py) was built and measured on a CPU: fp32 weight-gradient
matmuls (`torch.mm(out=dW)` is an `out=` call, which autocast never casts) and chunks of 128 MB of logits
(tuned to a CPU's caches). On an H200 an fp32 matmul runs at about 1/15 of bf16's rate, so there the op
follows what the run computes in:

* compute dtype (`compute_dtype_for`): on CUDA the run's autocast dtype (Trainer's bf16=True / fp16=True),
  else the weight's own dtype when it is bf16/fp16 (a model loaded in half precision), else None: an fp32
  run keeps fp32 matmuls, as stock. None is also every CPU run's answer: the CPU op is unchanged, bit for bit.
* with a half compute dtype: logits z = h·Wᵀ in that dtype (what autocast gives stock's head), softmax
  and log-sum-exp in fp32 (as Transformers' loss upcasts), dz rounded to the half dtype (stock's gradient
  of the upcast logits is too), dh = dz·W in it, and dW summed over chunks in fp32 with the half matmul
  accumulating in fp32 (`add_weight_grad`: cuBLAS with an fp32 output, `out_dtype=torch.float32`). Stock
  under autocast rounds each dW to bf16 once; this sum keeps fp32, so it is at least as precise.
* chunk rows (`cuda_chunk_rows`): max(H, 2,048), a multiple of 128. At C = H a chunk's fp32 logits
  [C, V] are the size of the fp32 weight gradient [V, H] the head holds anyway (whatever V is), and the
  floor keeps the chunks compute-bound: each chunk reads and writes dW (8·V·H bytes) against the 6·C·V·H
  FLOPs of its three matmuls, a ratio of 1.33·F / (C·BW), which at C = 2,048 on an H200 (F ≈ 790 TFLOP/s
  bf16 and BW ≈ 4.3 TB/s, both as measured on one: .library/device/KINDS.md) is about 12% of the chunk's
  matmul time. (Estimated, not yet timed: docs/gpu.md.)
* the shared factor (`shared_factor`): dW was summed with weight 1 per row, so the backward scales it by
  the one weight every row's loss had, and must know they were equal. A sum or mean's gradient is an
  expanded scalar (stride 0): equal by construction, nothing to read. Otherwise (TRL's fused calls) the
  CPU compares values at once, as before; CUDA compares on the device and reads the answer one step
  later (pinned memory, an event), so the step never waits: unequal weights raise at the next call.
"""

from __future__ import annotations

import logging

import torch

from turbotrain.utils.warnings import log_once

HALF = (torch.bfloat16, torch.float16)
MIN_CUDA_ROWS = 2048
ROW_MULTIPLE = 128


def compute_dtype_for(device: torch.device | str, weight_dtype: torch.dtype, autocast_dtype: torch.dtype | None):
    """The dtype the head's matmuls run in on `device` (None: the fp32 CPU op as built; see the module docstring)."""
    if torch.device(device).type != "cuda":
        return None
    if autocast_dtype in HALF:
        return autocast_dtype
    return weight_dtype if weight_dtype in HALF else None


def autocast_dtype_of(device: torch.device) -> torch.dtype | None:
    """The autocast dtype active for `device`'s type right now, or None."""
    kind = device.type
    if not torch.is_autocast_enabled(kind):
        return None
    return torch.get_autocast_dtype(kind)


def cuda_chunk_rows(hidden: int) -> int:
    """Rows per chunk on CUDA: max(H, 2,048), rounded up to a multiple of 128 (module docstring)."""
    rows = max(hidden, MIN_CUDA_ROWS)
    return -(-rows // ROW_MULTIPLE) * ROW_MULTIPLE


_ADDMM_INTO_FP32 = [True]  # older torch checks that addmm's `self` has the inputs' dtype: then mm, then add
_MM_OUT_DTYPE = [True]  # torch < 2.8 has no `out_dtype`: then the half product, added to dW in fp32


def add_weight_grad(dw: torch.Tensor, dz_t: torch.Tensor, h: torch.Tensor, first: bool) -> None:
    """dw (fp32 [V, H]) = or += dz_t [V, C] · h [C, H], both in a half dtype, accumulated in fp32.

    CUDA: cuBLAS with an fp32 output (`out_dtype`), no fp32 copy of either input; on torch < 2.8, which has no
    `out_dtype`, each chunk's half product summed into dW in fp32. Elsewhere (tests of the half path on a CPU,
    which has no such kernel): the same product in fp32 from the half inputs."""
    if dw.device.type != "cuda":
        if first:
            torch.mm(dz_t.float(), h.float(), out=dw)
        else:
            dw.addmm_(dz_t.float(), h.float())
        return
    _add_in_fp32(dw, dz_t, h, first)


def _add_in_fp32(dw: torch.Tensor, dz_t: torch.Tensor, h: torch.Tensor, first: bool) -> None:
    """CUDA's: the half product accumulated into fp32 dW by cuBLAS where torch can (add_weight_grad)."""
    if not _MM_OUT_DTYPE[0]:
        product = torch.mm(dz_t, h)  # rounded to the half dtype once, as stock's dW under autocast is
        dw.copy_(product) if first else dw.add_(product)
        return
    if first:
        try:
            torch.mm(dz_t, h, out_dtype=torch.float32, out=dw)
        except TypeError:  # no `out_dtype` keyword (torch < 2.8): checked on the host, before any kernel ran
            _MM_OUT_DTYPE[0] = False
            log_once("turbotrain: chunked head: this torch's mm has no out_dtype; each chunk's half product is "
                     "added to fp32 dW (rounded once, as stock's dW under autocast is)", logging.WARNING)  # fmt: skip
            dw.copy_(torch.mm(dz_t, h))
        return
    if _ADDMM_INTO_FP32[0]:
        try:
            torch.addmm(dw, dz_t, h, out_dtype=torch.float32, out=dw)
            return
        except RuntimeError as error:  # a shape/dtype check on the host, before any kernel ran
            _ADDMM_INTO_FP32[0] = False
            log_once(f"turbotrain: chunked head: this torch's addmm does not sum a {h.dtype} product into fp32 dW "
                     f"in place ({str(error)[:120]}); each chunk's fp32 product is added to dW: one more "
                     f"{dw.numel() * 4 / 2**20:,.0f} MB buffer and one more pass over dW a chunk", logging.WARNING)  # fmt: skip
    dw.add_(torch.mm(dz_t, h, out_dtype=torch.float32))


UNEQUAL_WEIGHTS = (
    "turbotrain chunked cross-entropy: the per-token losses were weighted unequally (e.g. TRL's "
    "loss_type='dft'), which the head's pre-summed gradient cannot follow; set "
    "chunked_cross_entropy='never' for this run."
)


class _PendingChecks:
    """Device-side 'were the weights unequal?' answers, read once their copy to pinned memory is done."""

    def __init__(self):
        self.pending: list[tuple[torch.Tensor, object]] = []

    def add(self, unequal: torch.Tensor) -> None:
        host = torch.empty((), dtype=torch.bool, pin_memory=True)
        host.copy_(unequal, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(unequal.device))  # the stream of the copy's device
        self.pending.append((host, event))

    def raise_if_unequal(self) -> None:
        """Raise for an answer that has arrived and says unequal; keep the ones still on their way."""
        still = []
        for host, event in self.pending:
            if not event.query():
                still.append((host, event))
            elif bool(host):
                self.pending = []
                raise RuntimeError(UNEQUAL_WEIGHTS + " (found on the previous step's backward)")
        self.pending = still


PENDING = _PendingChecks()


def shared_factor(grad_nll: torch.Tensor) -> torch.Tensor:
    """The one factor every row's loss is weighted by (dW was summed with weight 1 per row)."""
    if grad_nll.numel() == 0:
        return grad_nll.new_zeros(())
    factor = grad_nll[0]
    if grad_nll.numel() == 1 or grad_nll.stride(0) == 0:  # an expanded scalar: a sum or mean's gradient
        return factor
    unequal = (grad_nll != factor).any()
    if grad_nll.device.type == "cuda":
        PENDING.add(unequal)
    elif bool(unequal):
        raise RuntimeError(UNEQUAL_WEIGHTS)
    return factor
