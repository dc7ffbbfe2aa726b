"""The GPU check's real-shape part (`--only realshape`): TurboTrainer against a GPU user's peers at published
model shapes, 3 interleaved rounds, medians.

Workloads (bf16 autocast on CUDA; random weights from the published configs of src/turbotrain/bench/shapes.py,
nothing downloaded): for each of `qwen2.5-0.5b` (batch 8) and `llama3.2-1b` (batch 4):
* sft: chat-like rows, length log-normal (median 500, sigma 0.8, 16 to 4,096 tokens), the first 10-50% a prompt
  labelled -100; sft-lora: the same, PEFT LoRA r=16 on q/k/v/o and the MLP projections;
* dpo: TRL's DPOTrainer, full fine-tune against a separate reference model (a copy of the same weights), batch/2
  pairs of a prompt (median 250) and two completions (median 250 each), beta 0.1, reference log-probs in the step.
Peers (scripts/gpu_check_bench.py builds the Trainer ones as a user writes them): `stock (sdpa)`, `turbotrain`,
`stock + flattening`, `liger`, `turbotrain + liger` (TurboTrainer with `use_liger_kernel=True`: Liger's fused
loss and layers, turbotrain's other passes), `trl defaults` (SFTTrainer / DPOTrainer with their config's defaults: gradient
checkpointing on, TRL >= 1.15's fused LM head on GPUs), `trl defaults + turbotrain` (turbo(SFTTrainer)),
`stock (flash_attention_2)`, `turbotrain (onnxruntime)`, `torch_compile` (Trainer's own), `turbotrain +
torch_compile` (TurboTrainer under Trainer's torch.compile: auto steps aside, the passes run inside the compiled
model); DPO: `trl defaults` is its stock,
beside `turbotrain` (turbo(DPOTrainer), same config), `liger` and `turbotrain + liger`. A peer that needs what is not installed is a
row saying why. Every round trains each peer from the same weights on the same batches (A B C A B C ...),
`warmup` untimed steps then `steps` timed. `--quick` (CPU): 2 rounds, QUICK_CONFIG's 2 layers of hidden 64.
Reported per row: median tokens/s over the rounds (real tokens: DPO counts both rows of a pair), speed against the
workload's stock (the median of the per-round ratios, each round's beside it), median MFU (measure/flops.py on
real tokens; DPO adds the reference's forward, a third of the policy's step) against the device's dense bf16
peak (H100/H200 SXM 989.4 TFLOP/s; else a measured bf16 matmul), peak memory (the largest round's), and the loss
against stock at every step of every round: a row FAILs above 2e-2 relative (bf16; 1e-3 in fp32 on a CPU).

Time: rows are planned in priority order (stock and turbotrain of every workload, the fastest peers of the
2026-12-04 H200 run next, the torch_compile pair last) while their estimates fit `--budget-s`; the rest are listed as
skipped with their estimate. A row's estimate: rounds x (SETUP_S + (warmup + steps) x the step's FLOPs over
EST_MFU of the peak) (+ COMPILE_S per round for the torch_compile pair, + EXPORT_S for onnxruntime), the step's FLOPs from
the generated batches. EST_MFU 3% is the H200 run's stock SFT at its 8-layer check shape (0.7%, the head over a
152k vocabulary most of the step) scaled by the published shapes' 3x deeper body; it is a guess, so every row
reports its estimate beside its measured seconds. Where rows were skipped and time is left after them, a second
pass scales every estimate by what the first pass measured (wall over estimate, the compiling rows apart) and runs
the skipped rows that fit then, in the same priority order, each workload's stock again beside them for their
ratios (`second_pass`). The default budget, 330 s, leaves room for two runs in 15
minutes of device time: 120 s start-up + 2 x (330 s + ~30 s for the wheels' install and imports) = 840 s.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import math
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, replace

import torch
from scripts.gpu_check_bench import LORA_TARGETS, Sizes, _trl_trainer, isolated, make_trainer, measure

SHAPES = ("qwen2.5-0.5b", "llama3.2-1b")
BATCH = {"qwen2.5-0.5b": 8, "llama3.2-1b": 4}
KINDS = ("sft", "sft-lora", "dpo")
FULL = Sizes(hidden=0, layers=0, heads=0, batch=8, max_len=4096, warmup=1, steps=2)
QUICK = Sizes(hidden=64, layers=2, heads=4, batch=4, max_len=48, warmup=1, steps=1)
QUICK_CONFIG = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    intermediate_size=128, vocab_size=4096,
)  # fmt: skip
ROUNDS, QUICK_ROUNDS = 3, 2
DEFAULT_BUDGET_S = 330.0
EST_MFU, SETUP_S, COMPILE_S, EXPORT_S = 0.03, 3.0, 40.0, 30.0
LOSS_TOLERANCE = {torch.bfloat16: 2e-2, torch.float32: 1e-3}
SFT_PEERS = (
    "stock (sdpa)",
    "turbotrain",
    "stock + flattening",
    "liger",
    "turbotrain + liger",
    "trl defaults",
    "trl defaults + turbotrain",
    "stock (flash_attention_2)",
    "turbotrain (onnxruntime)",
    "torch_compile",
    "turbotrain + torch_compile",
)
COMPILES = ("torch_compile", "turbotrain + torch_compile")  # planned last: each round compiles
DPO_PEERS = ("trl defaults", "turbotrain", "liger", "turbotrain + liger")
FIRST = ("stock (sdpa)", "turbotrain")  # then the 2026-12-04 run's fastest SFT peers, then TRL's, compiles last
LARGE_WHEEL = "its wheel is too large to carry to a GPU machine without a package index (64 MiB per call)"


@dataclass(frozen=True)
class Workload:
    shape: str
    kind: str

    @property
    def name(self) -> str:
        return f"{self.shape} {self.kind}"

    def peers(self) -> tuple[str, ...]:
        return DPO_PEERS if self.kind == "dpo" else SFT_PEERS

    def stock(self) -> str:
        return "trl defaults" if self.kind == "dpo" else "stock (sdpa)"


def plan(shapes=SHAPES) -> list[tuple[Workload, str]]:
    """(workload, peer) in priority order: every workload's stock and turbotrain, then the peers by the
    2026-12-04 run's speed, then torch_compile."""
    workloads = [Workload(shape, kind) for shape in shapes for kind in KINDS]
    order = [p for p in SFT_PEERS if p not in FIRST and p not in COMPILES] + list(COMPILES)
    first = [(w, p) for w in workloads for p in w.peers() if p in FIRST or p == w.stock()]
    return first + [(w, p) for p in order for w in workloads if p in w.peers() and (w, p) not in first]


def unavailable(workload: Workload, peer: str, device: torch.device) -> str | None:
    """Why `peer` cannot run here (a package missing, not meaningful), or None."""
    if peer in ("trl defaults", "trl defaults + turbotrain") and importlib.util.find_spec("trl") is None:
        return "trl not installed"
    if "liger" in peer and importlib.util.find_spec("liger_kernel") is None:
        return "liger-kernel not installed"
    if peer == "stock (flash_attention_2)" and importlib.util.find_spec("flash_attn") is None:
        return f"flash-attn not installed: {LARGE_WHEEL}, and none is built for this torch/CUDA"
    if peer == "turbotrain (onnxruntime)":
        if workload.kind != "sft":
            return "run for full sft only"
        if importlib.util.find_spec("onnxruntime") is None:
            return "onnxruntime not installed"
        import onnxruntime

        if device.type == "cuda" and "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            return f"onnxruntime-gpu not installed (the CPU wheel is; onnxruntime-gpu: {LARGE_WHEEL})"
    return None


# --- models and data --------------------------------------------------------------------------------------------


def build_model(workload: Workload, quick: bool, meta: bool = False):
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    from turbotrain.bench.shapes import shape_config

    overrides = dict(QUICK_CONFIG) if quick else {}
    config = shape_config(workload.shape, seq_len=4096, overrides=overrides, untied=False, dropout=0.0)
    torch.manual_seed(0)
    with torch.device("meta" if meta else "cpu"):
        model = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)](config)
    if workload.kind == "sft-lora":
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    return model


def sizes(workload: Workload, quick: bool) -> Sizes:
    return QUICK if quick else replace(FULL, batch=BATCH[workload.shape])


def build_examples(workload: Workload, quick: bool, vocab: int) -> list[dict]:
    """SFT: {input_ids, labels (prompt -100), prompt}; DPO: {prompt_ids, chosen_ids, rejected_ids} (token ids)."""
    s = sizes(workload, quick)
    generator = torch.Generator().manual_seed(1)
    median = 24 if quick else 500

    def draw(mid: float) -> int:
        return int(min(s.max_len, max(4, math.exp(math.log(mid) + 0.8 * torch.randn(1, generator=generator).item()))))

    def ids(n: int) -> list[int]:
        return torch.randint(4, min(vocab, 32_000), (n,), generator=generator).tolist()

    examples = []
    count = (s.warmup + s.steps) * (s.batch // 2 if workload.kind == "dpo" else s.batch)
    for _ in range(count):
        if workload.kind == "dpo":
            prompt = draw(median / 2)
            chosen, rejected = (min(draw(median / 2), s.max_len - prompt) for _ in range(2))
            examples.append({"prompt_ids": ids(prompt), "chosen_ids": ids(chosen), "rejected_ids": ids(rejected)})
            continue
        length = draw(median)
        prompt = int(length * (0.1 + 0.4 * torch.rand(1, generator=generator).item()))
        tokens = ids(length)
        examples.append({"input_ids": tokens, "labels": [-100] * prompt + tokens[prompt:], "prompt": prompt})
    return examples


def estimate_s(workload: Workload, peer: str, quick: bool, peak: float, rounds: int) -> float:
    """Seconds `peer` needs for `rounds` rounds of `workload` (the module docstring's formula)."""
    s = sizes(workload, quick)
    extra = COMPILE_S if peer in COMPILES else EXPORT_S if "onnxruntime" in peer else 0.0
    return rounds * (SETUP_S + extra + (s.warmup + s.steps) * _step_s(workload, quick, peak))


@functools.cache
def _step_s(workload: Workload, quick: bool, peak: float) -> float:
    """Seconds of a mean step: its FLOPs (the generated batches' real tokens) at EST_MFU of `peak`."""
    from turbotrain.measure.flops import ModelFlops, StepWork, step_flops

    s = sizes(workload, quick)
    model = build_model(workload, quick, meta=True)
    examples = build_examples(workload, quick, model.config.vocab_size)
    lengths = [len(e["input_ids"]) for e in examples] if workload.kind != "dpo" else []
    for e in examples if workload.kind == "dpo" else []:
        lengths += [len(e["prompt_ids"]) + len(e["chosen_ids"]), len(e["prompt_ids"]) + len(e["rejected_ids"])]
    work = StepWork(sum(lengths), sum(lengths), sum(n * n for n in lengths))
    flops = step_flops(ModelFlops.of(model), work) * (4 / 3 if workload.kind == "dpo" else 1)
    return flops / (s.warmup + s.steps) / (EST_MFU * peak)


# --- peers -----------------------------------------------------------------------------------------------------


class PreferenceCounting:
    """TRL's preference collator, noting each batch's real tokens and FLOPs (policy step + reference forward)."""

    def __init__(self, inner, model):
        from turbotrain.measure.flops import ModelFlops

        self.inner, self.flops_model = inner, ModelFlops.of(model)
        self.tokens: list[int] = []
        self.flops: list[float] = []

    def __call__(self, features):
        from turbotrain.measure.flops import batch_work, step_flops

        batch = self.inner(features)
        self.tokens.append(int(batch["attention_mask"].sum()))
        work = batch_work(batch, packed=True, sparse_head=False, causal=True)
        self.flops.append(step_flops(self.flops_model, work) * 4 / 3)
        return batch


def _word_tokenizer(vocab: int):
    """A word-level tokenizer whose word `t<i>` is id i (bos 0, pad 1, eos 2, unk 3: bench/shapes.py's ids)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    words = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3} | {f"t{i}": i for i in range(4, min(vocab, 32_000))}
    tokenizer = Tokenizer(WordLevel(words, unk_token="<unk>"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )


def dpo_trainer(peer: str, model, examples, output_dir: str, device: torch.device, s: Sizes):
    from scripts.gpu_check_bench import common_arguments, in_memory_dataset
    from trl import DPOConfig, DPOTrainer

    if peer.startswith("turbotrain"):
        from turbotrain import turbo, turbo_arguments

        DPOConfig, DPOTrainer = turbo_arguments(DPOConfig), turbo(DPOTrainer)  # noqa: N806

    def text(ids: list[int], lead: str = "") -> str:
        return lead + " ".join(f"t{i}" for i in ids)

    rows = {
        "prompt": [text(e["prompt_ids"]) for e in examples],
        "chosen": [text(e["chosen_ids"], " ") for e in examples],
        "rejected": [text(e["rejected_ids"], " ") for e in examples],
    }
    kw = common_arguments(output_dir, replace(s, batch=s.batch // 2), device, quick=False)
    kw.pop("remove_unused_columns")
    options = {"use_liger_kernel": True} if "liger" in peer else {}
    args = DPOConfig(**kw, **options, beta=0.1, max_length=None, precompute_ref_log_probs=False)
    trainer = DPOTrainer(
        model=copy.deepcopy(model),
        ref_model=copy.deepcopy(model),
        args=args,
        train_dataset=in_memory_dataset(rows),
        processing_class=_word_tokenizer(model.config.vocab_size),
    )
    trainer.data_collator = PreferenceCounting(trainer.data_collator, model)
    return trainer


def build_trainer(workload: Workload, peer: str, model, examples, output_dir: str, device, quick: bool):
    s = sizes(workload, quick)
    if workload.kind == "dpo":
        return dpo_trainer(peer, model, examples, output_dir, device, s)
    if peer.startswith("trl defaults"):
        from scripts.gpu_check_bench import common_arguments

        kw, pad_id = common_arguments(output_dir, s, device, quick), model.config.pad_token_id
        return _trl_trainer(copy.deepcopy(model), examples, kw, pad_id, "sft", {}, peer.endswith("turbotrain"))
    return make_trainer("sft", peer, model, examples, output_dir, device, quick, s)


# --- the rounds ------------------------------------------------------------------------------------------------


def device_peak(device: torch.device) -> tuple[float, str]:
    """(dense bf16 FLOP/s, what it is) of the device: the datasheet's for H100/H200, else a measured matmul."""
    from turbotrain.measure.peak import matmul_peak

    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if "H100" in name and ("PCIe" in name or "NVL" in name):
            peak = 756e12 if "PCIe" in name else 835e12
            return peak, f"{name} dense bf16 {peak / 1e12:.0f} TFLOP/s (datasheet)"
        if "H100" in name or "H200" in name:
            return 989.4e12, f"{name} dense bf16 989.4 TFLOP/s (datasheet)"
        measured = matmul_peak(torch.bfloat16, device, size=8192, repeats=3).flops_per_s
        return measured, f"{name} measured bf16 matmul {measured / 1e12:.0f} TFLOP/s"
    measured = matmul_peak(torch.float32, "cpu", size=256, repeats=2).flops_per_s
    return measured, "this CPU's measured fp32 matmul peak"


def realshape_rows(
    device: torch.device, quick: bool, deadline, shapes=SHAPES, peers=None, on_progress=None
) -> tuple[list[dict], str]:
    """Every (workload, peer) row of `plan(shapes)` (only `peers` and each workload's stock, where given; a
    workload whose only chosen peer is its stock is skipped), in the order of SHAPES, KINDS and the workload's
    peers; and what the MFU is against. `on_progress(rows, peak_text)` after each round."""
    unknown = set(peers or ()) - set(SFT_PEERS) | set(shapes) - set(SHAPES)
    if unknown:
        raise ValueError(f"realshape: unknown shapes or peers {sorted(unknown)}; peers: {', '.join(SFT_PEERS)}")
    peak, peak_text = device_peak(device)
    rounds = QUICK_ROUNDS if quick else ROUNDS
    chosen: dict[Workload, list[str]] = {}
    rows: dict[tuple[Workload, str], dict] = {}
    planned = 0.0
    for workload, peer in plan(shapes):
        if peers is not None and peer not in peers and peer != workload.stock():
            continue
        estimate = estimate_s(workload, peer, quick, peak, rounds)
        row = rows[(workload, peer)] = {"workload": workload.name, "peer": peer, "est. s": f"{estimate:.0f}"}
        if peers is not None and not set(workload.peers()) & set(peers) - {workload.stock()}:
            row.update(result="skipped", note="skipped: no other peer chosen")  # a later call's: its stock alone
            continue
        why = unavailable(workload, peer, device)
        if why is None and not quick and planned + estimate > deadline.left() - ROUND_RESERVE_S:  # a last round's spare
            why = f"skipped: time budget ({planned:.0f} s planned of {deadline.left():.0f} s)"
        if why is not None:
            row.update(result="n/a" if "skipped" not in why else "skipped", note=why)
            continue
        planned += estimate
        chosen.setdefault(workload, []).append(peer)

    def progress() -> None:  # the table so far, written out after every round: a call cut off at its limit keeps it
        if on_progress is not None:
            on_progress(_ordered(rows), peak_text)

    for workload, chosen_peers in chosen.items():
        _run_workload(workload, chosen_peers, rows, device, quick, rounds, peak, deadline, progress)
    for workload, again in second_pass(rows, deadline.left() - ROUND_RESERVE_S).items():  # what the guesses left out
        _run_again(workload, again, rows, device, quick, rounds, peak, deadline, progress)
    progress()
    return _ordered(rows), peak_text


BUDGET_SKIP = "skipped: time budget ("


def _scales(rows: dict, rounds: int = ROUNDS) -> dict[bool, float]:
    """Measured wall over estimate of the rows that ran (each row's estimate for the rounds it ran of `rounds`),
    the compiling ones (True) apart from the others; 1.0 where none of a kind ran."""
    sums = {True: [0.0, 0.0], False: [0.0, 0.0]}
    for (_, peer), row in rows.items():
        if row.get("rounds") and "wall s" in row:
            part = sums[peer in COMPILES]
            part[0] += float(row["wall s"])
            part[1] += float(row["est. s"]) * min(row["rounds"], rounds) / rounds
    return {kind: wall / estimate if estimate else 1.0 for kind, (wall, estimate) in sums.items()}


def second_pass(rows: dict, left_s: float) -> dict[Workload, list[str]]:
    """The rows the first plan skipped for time that fit in `left_s` once every estimate is scaled by what the
    first pass measured (`_scales`), in priority order; each workload's stock runs again beside them (its ratios
    are per round), counted once. The chosen rows get `planned s`, their own scaled estimate."""
    scale = _scales(rows)
    if not any(row.get("rounds") for row in rows.values()):
        return {}  # nothing measured: the guess stands
    planned, again = 0.0, {}
    for (workload, peer), row in rows.items():  # the plan's order
        if not str(row.get("note", "")).startswith(BUDGET_SKIP):
            continue
        own = float(row["est. s"]) * scale[peer in COMPILES]
        stock = rows[(workload, workload.stock())]
        if stock.get("result") == "ERROR":
            continue
        need = own
        if peer != workload.stock() and not stock.get("rounds") and workload.stock() not in again.get(workload, []):
            continue  # no stock rounds to give its ratios, and none planned
        if workload not in again and peer != workload.stock() and stock.get("rounds"):
            need += float(stock["est. s"]) * scale[False]
        if planned + need > left_s:
            continue
        planned += need
        row["planned s"] = own
        again.setdefault(workload, []).append(peer)
    return {workload: peers for workload, peers in again.items() if peers != [workload.stock()]}  # no stock alone


def _run_again(workload, peers, rows, device, quick, rounds, peak, deadline, progress=None) -> None:
    """`peers` of the second pass, interleaved with `workload`'s stock as in the first: where stock ran then, its
    rounds here only give these rows their ratios (its own row keeps the first pass's)."""
    stock = workload.stock()
    view = dict(rows)
    if stock not in peers:
        scaled = float(rows[(workload, stock)]["est. s"]) * _scales(rows)[False]
        view[(workload, stock)] = {**rows[(workload, stock)], "planned s": scaled}
        peers = [stock, *peers]
    for peer in peers:
        if view[(workload, peer)] is rows[(workload, peer)]:
            for key in ("result", "note"):
                rows[(workload, peer)].pop(key, None)
    _run_workload(workload, peers, view, device, quick, rounds, peak, deadline, progress)
    for peer in peers:
        row = rows[(workload, peer)]
        if view[(workload, peer)] is row and peer != stock and row.get("rounds"):
            row["note"] = "; ".join(filter(None, ["second pass, beside a stock of its own", row.get("note")]))


def _ordered(rows: dict) -> list[dict]:
    order = {key: (SHAPES.index(key[0].shape), KINDS.index(key[0].kind), key[0].peers().index(key[1])) for key in rows}
    return [rows[key] for key in sorted(rows, key=order.get)]


MEASURED = ("rounds", "tokens/s", "vs stock", "per round", "MFU", "peak GiB", "loss vs stock")  # _summary's figures
ROUND_RESERVE_S = 10.0  # left beyond a round's estimate before it starts: a peer's first round also compiles and
# times its kernels (not in the estimate), and the call's limit leaves ~30 s past the budget


def _run_workload(workload, peers, rows, device, quick, rounds, peak, deadline, progress=None) -> None:
    """`rounds` rounds of `peers` on `workload`, interleaved; each row gets its medians and its verdict, after every
    round (`progress()` then writes the table: a call cut off at its limit keeps the rounds it measured)."""
    segments = {peer: float(rows[(workload, peer)].get("planned s", rows[(workload, peer)]["est. s"])) / rounds
                for peer in peers}  # fmt: skip
    if not quick and deadline.left() < min(segments.values()) + ROUND_RESERVE_S:
        for peer in peers:
            rows[(workload, peer)]["note"] = f"0 of {rounds} rounds: time budget"
        return  # no peer could start: the model is not even built
    model = build_model(workload, quick).to(device)  # each peer's copy is made on the device
    examples = build_examples(workload, quick, model.config.vocab_size)
    s = sizes(workload, quick)
    results: dict[str, list[dict]] = {peer: [] for peer in peers}
    started = {peer: 0.0 for peer in peers}
    for index in range(rounds):
        for peer in peers:
            row = rows[(workload, peer)]
            if row.get("result") == "ERROR":
                continue
            if not quick and deadline.left() < segments[peer] + ROUND_RESERVE_S:  # round 1 too: estimates are guesses
                row["time budget"] = f"{len(results[peer])} of {rounds} rounds: time budget"
                continue
            print(
                f"realshape: {workload.name} / {peer}, round {index + 1} ({deadline.left():.0f} s left)",
                file=sys.stderr,
            )
            begin = time.monotonic()
            try:
                build = functools.partial(build_trainer, workload, peer, model, examples, device=device, quick=quick)
                with isolated(peer):  # Liger's patches of Transformers undone after its round
                    results[peer].append(measure(build, s.warmup, device))
            except Exception as error:  # one peer failing does not stop the table
                traceback.print_exc()
                for column in MEASURED:  # an earlier round's figures would read as this peer's
                    row.pop(column, None)
                row.update(result="ERROR", note=f"{type(error).__name__}: {str(error)[:240]}")
            started[peer] += time.monotonic() - begin
        _summarize(workload, peers, rows, results, started, device, peak)
        if progress is not None:
            progress()


def _summarize(workload, peers, rows, results: dict[str, list[dict]], started: dict, device, peak) -> None:
    """Each row's medians and verdict over the rounds measured so far; a row cut short by time says so."""
    stock = results.get(workload.stock(), [])
    tolerance = LOSS_TOLERANCE[torch.bfloat16 if device.type == "cuda" else torch.float32]
    for peer in peers:
        row = rows[(workload, peer)]
        row["wall s"] = f"{started[peer]:.0f}"
        if results[peer] and row.get("result") != "ERROR":
            row.update(_summary(results[peer], stock, peak, tolerance, is_stock=peer == workload.stock()))
        cut = row.pop("time budget", None)
        if cut is not None and row.get("result") != "ERROR":
            row["note"] = "; ".join(filter(None, [cut, row.get("note") if results[peer] else None]))


def _summary(runs: list[dict], stock: list[dict], peak: float, tolerance: float, is_stock: bool) -> dict:
    from scripts.gpu_check_bench import loss_difference

    ratios = [r["tokens_s"] / b["tokens_s"] for r, b in zip(runs, stock) if b["tokens_s"]]
    differences = [loss_difference(r["losses"], b["losses"]) for r, b in zip(runs, stock)]
    worst = max((d for d in differences if d is not None), default=None)
    if not stock and not is_stock:  # stock ERRORed or ran out of time: nothing to compare with
        return {"rounds": len(runs), "tokens/s": f"{statistics.median(r['tokens_s'] for r in runs):,.0f}",
                "result": "n/a", "note": "no stock round to compare with"}  # fmt: skip
    failed = worst is None or worst > tolerance if not is_stock else False
    peaks = [r["peak_gb"] for r in runs if r["peak_gb"] is not None]
    note = next((r["summary"] for r in runs if r["summary"]), "").removeprefix("turbotrain: ")
    return {
        "rounds": len(runs),
        "tokens/s": f"{statistics.median(r['tokens_s'] for r in runs):,.0f}",
        "vs stock": f"{statistics.median(ratios):.2f}x" if ratios else "",
        "per round": "/".join(f"{x:.2f}" for x in ratios),
        "MFU": f"{statistics.median(r['flops_s'] for r in runs) / peak:.1%}",
        "peak GiB": f"{max(peaks):.1f}" if peaks else "n/a (CPU)",
        "loss vs stock": f"{worst:.1e}" if worst is not None else "",
        "result": "FAIL" if failed else "PASS",
        **({"note": f"loss above {tolerance:.0e} of stock's; {note}"} if failed else {"note": note}),
    }


COLUMNS = [
    "workload", "peer", "rounds", "tokens/s", "vs stock", "per round", "MFU", "peak GiB", "loss vs stock",
    "est. s", "wall s", "result", "note",
]  # fmt: skip
