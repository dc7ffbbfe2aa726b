"""The device check's "kernels" section: packed attention's exact kernels timed on one packed batch at published
attention layouts, and the kernel the measured choice takes (passes/padding_free/kernel_choice.py).

Per shape (Qwen2.5-0.5B: 14 query heads, 2 KV heads of 64; Llama-3.2-1B: 32 and 8 of 64; Llama-2-7B: 32 and 32
of 128, no GQA; their published configs), one batch of chat-like lengths (seeded log-normal draw: median ~500 tokens, tail to 4,096, as many
sequences as fit 16,384 tokens) packed into one row, bf16 on CUDA, causal, random query/key/value. Each kernel that
can take the call runs it forward and backward (kernel_choice.timed_kernels: one warm-up, median of 3, CUDA
synchronised; a kernel that disagrees with per_length is dropped with a warning). `row_mask` is what stock +
`DataCollatorWithFlattening` runs on the same rows (the model's SDPA with a block-diagonal mask), so the chosen
row is PASS when its time is within 5% of row_mask's or below, FAIL otherwise (the issue's "never slower than
stock + flattening" for the attention itself; the step-level figure is the bench and realshape sections').
`--quick` on the CPU: fp32, lengths with median ~24 and tail 64.
"""

from __future__ import annotations

import math

import torch

# query heads, KV heads, head dim (published configs); Llama-2-7B has no GQA: the layout every varlen kernel takes on
# any torch (torch_varlen takes GQA from torch 2.13 on, which a GPU machine's image may not have)
LAYOUTS = {"qwen2.5-0.5b": (14, 2, 64), "llama-3.2-1b": (32, 8, 64), "llama-2-7b": (32, 32, 128)}
TOKENS, MEDIAN, LONGEST = 16384, 500, 4096
QUICK = (256, 24, 64)
SLACK = 1.05


def chat_lengths(tokens: int, median: int, longest: int, seed: int = 0) -> list[int]:
    """Seeded log-normal lengths (sigma 0.9) between 8 and `longest`, as many as fit `tokens` in all."""
    generator = torch.Generator().manual_seed(seed)
    lengths, total = [], 0
    while True:
        draw = math.exp(math.log(median) + 0.9 * float(torch.randn((), generator=generator)))
        length = int(min(max(draw, 8), longest))
        if total + length > tokens:
            return lengths
        lengths.append(length)
        total += length


def packed_call(layout: tuple[int, int, int], lengths: list[int], device, dtype):
    """One causal SDPA call on the sequences packed into one row (each row's tail a segment), as padding-free
    hands it to the attention function."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from turbotrain.passes.padding_free.attention_kernels import PackedCall
    from turbotrain.passes.padding_free.packed_sequences import PACKED_SEQUENCES, sequence_metadata

    heads, kv_heads, head_dim = layout
    total = sum(lengths)
    capacity = -(-total // 8) * 8
    segments = torch.full((1, capacity), len(lengths))
    starts = torch.tensor([0, *lengths[:-1]]).cumsum(0)
    for index, (start, length) in enumerate(zip(starts.tolist(), lengths)):
        segments[0, start : start + length] = index
    meta = sequence_metadata(segments, torch.tensor(lengths), starts)
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, h, capacity, head_dim, generator=generator, device=device, dtype=dtype)
               for h in (heads, kv_heads, kv_heads))  # fmt: skip
    kwargs = {key: value for key, value in meta.items() if key != PACKED_SEQUENCES}
    kwargs["scaling"] = head_dim**-0.5
    module = torch.nn.Module()
    module.num_key_value_groups = heads // kv_heads
    return PackedCall(sdpa_attention_forward, "sdpa", module, q, k, v, meta[PACKED_SEQUENCES].to(device), True, kwargs)


def kernel_rows(device: torch.device, quick: bool, lengths_given: tuple[int, int, int] | None = None) -> list[dict]:
    """The section's rows; `lengths_given`: (tokens, median, longest) instead of the defaults. The row mask is
    timed wherever it fits in memory, also where the choice does not try it (its work bound): the table shows
    whether that bound gave up a faster kernel (the chosen row FAILs then). A layout that raises is one ERROR row."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    tokens, median, longest = lengths_given or (QUICK if quick else (TOKENS, MEDIAN, LONGEST))
    rows = []
    for shape, layout in LAYOUTS.items():
        try:
            rows += _layout_rows(shape, layout, device, dtype, (tokens, median, longest))
        except Exception as error:  # one layout failing does not stop the table
            note = f"{type(error).__name__}: {str(error)[:200]}"
            rows.append({"shape": shape, "kernel": "(the layout)", "result": "ERROR", "note": note})
        if device.type == "cuda":
            torch.cuda.empty_cache()  # each layout's tensors gone before the next (out of the except: none held)
    return rows


def _layout_rows(shape: str, layout, device: torch.device, dtype: torch.dtype, sizes: tuple[int, int, int]):
    from turbotrain.passes.padding_free import attention_kernels, kernel_choice

    tokens, median, longest = sizes
    rows = []
    lengths = chat_lengths(tokens, median, longest)
    call = packed_call(layout, lengths, device, dtype)
    names = attention_kernels.applicable(call, kernel_choice.failed_for(call))
    capacity = call.query.shape[2]
    fits = capacity * capacity <= attention_kernels.ROW_MASK_MAX_ELEMENTS
    timed = [*names, "row_mask"] if fits and "row_mask" not in names else names
    timings = kernel_choice.timed_kernels(call, timed, training=True, what=shape)
    chosen = kernel_choice.fastest_exact(timings, names)  # the choice's rule on these timings: measured once
    flattening = timings.get("row_mask")
    batch = f"{len(lengths)} sequences, {sum(lengths):,} tokens (median {sorted(lengths)[len(lengths) // 2]})"
    for name in ["flash_attn", "torch_varlen", "flex", "row_mask", "per_length"]:
        row = {"shape": shape, "batch": batch, "kernel": name}
        if name not in timings:
            row["note"] = "cannot take this call here" if name not in timed else "dropped (disagreed or raised)"
            rows.append(row)
            continue
        if name not in names:
            row["note"] = "not tried by the choice here (its work bound)"
        row["fwd+bwd ms"] = f"{timings[name] * 1e3:.2f}"
        row["vs row_mask (stock + flattening)"] = f"{flattening / timings[name]:.2f}x" if flattening else ""
        if name == chosen:
            row["chosen"] = "yes"
            fine = flattening is None or timings[name] <= flattening * SLACK
            row["result"] = "PASS" if fine else "FAIL: slower than stock + flattening's attention"
        rows.append(row)
    return rows
