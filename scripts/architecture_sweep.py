"""Stock `Trainer` against `TurboTrainer` on every family of Transformers' task mappings: text and media.

    PYTHONPATH=src nice -n 19 python scripts/architecture_sweep.py [--tasks causal-lm ctc image-cls ...]
        [--types llama bert ...] [--steps 3] [--budget 120] [--total 3600] [--out sweep.md]

For each (model type, task) of `scripts/architectures.TASK_MAPPINGS` (text: causal-lm, masked-lm, seq-cls,
token-cls, qa, seq2seq-lm; media, `scripts/task_inputs.py`: image-cls, semantic-seg, object-detection,
contrastive, masked-image, video-cls, ctc, audio-cls, audio-frame-cls, speech-seq2seq, vision-to-text) a tiny
model is built from its config (`scripts/tiny_configs.py`) and trained N steps by both trainers from the same
weights on the same batches (padded, variable-length text and audio). Each model runs in a forked child with
its own time budget, so a hang or a crash takes only that row. Status: `same` (every step's loss and the first
step's gradients within 1e-5 relative, the final parameters within 1e-2: see PARAM_TOLERANCE), `DIFFERENT`,
`turbo crashed`, `stock crashed`, `skipped: reason`, `timeout`; the passes applied name what turbotrain did
(none: every pass stepped aside). One progress line per model on stderr; the markdown table on stdout (and
`--out`).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
import traceback
import warnings

from transformers.models.auto import modeling_auto

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.architectures import TASK_MAPPINGS, Skip, StockCrash, compare  # noqa: E402

TOLERANCE = 1e-5  # losses and first-step gradients, relative
PARAM_TOLERANCE = 1e-2  # final parameters after N AdamW steps, each relative to max(its largest value, 1% of
# the model's): Adam divides by sqrt(v), so a gradient that is float noise in both runs (a key layer norm's bias,
# zero in exact arithmetic) moves its weight by +-lr either way; the per-step losses carry the trajectory check


PRIORITY = (
    "bert roberta deberta-v2 electra distilbert albert xlm-roberta modernbert gpt2 gpt_neox gptj llama mistral "
    "mixtral qwen2 qwen3 qwen2_moe gemma gemma2 gemma3_text phi phi3 falcon opt bloom mpt t5 bart mbart marian "
    "pegasus mt5 longt5"
).split()


def _child(model_type: str, task: str, steps: int, queue) -> None:
    import logging

    import torch
    import transformers

    torch.set_num_threads(1)  # a shared machine: one thread per model ran faster than two here

    transformers.logging.set_verbosity_error()
    logging.getLogger("turbotrain").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    try:
        outcome = compare(model_type, task, steps)
        different = max(outcome.loss_diff, outcome.grad_diff) > TOLERANCE or outcome.param_diff > PARAM_TOLERANCE
        queue.put(("DIFFERENT" if different else "same", outcome, ""))
    except Skip as reason:
        queue.put((f"skipped: {reason}", None, ""))
    except StockCrash as error:
        queue.put(("stock crashed", None, str(error)[:200]))
    except Exception as error:
        tail = traceback.format_exc().strip().splitlines()[-6:]
        queue.put(("turbo crashed", None, f"{type(error).__name__}: {str(error)[:200]} | " + " / ".join(tail)))


def run_one(model_type: str, task: str, steps: int, budget: float):
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(model_type, task, steps, queue))
    child.start()
    try:
        return queue.get(timeout=budget)
    except Exception:
        return ("timeout", None, f"over {budget:.0f} s")
    finally:
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join()


def pairs(tasks: list[str], types: list[str] | None) -> list[tuple[str, str]]:
    found = []
    for task in tasks:
        for model_type in getattr(modeling_auto, TASK_MAPPINGS[task]):
            if types is None or model_type in types:
                found.append((model_type, task))
    rank = {name.replace("-", "_"): i for i, name in enumerate(PRIORITY)}
    return sorted(found, key=lambda pair: (rank.get(pair[0].replace("-", "_"), len(rank)), pair[0], pair[1]))


def row(model_type, task, status, outcome, detail) -> str:
    status, detail = (" ".join(text.split()).replace("|", "/") for text in (status, detail))  # one table line
    if outcome is None:
        return f"| {model_type} | {task} | {status} | | | | | {detail.replace('|', '/')} |"
    return (
        f"| {model_type} | {task} | {status} | {outcome.loss_diff:.1e} | {outcome.grad_diff:.1e} | "
        f"{outcome.param_diff:.1e} | {', '.join(outcome.applied) or 'none'} | {outcome.worst} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASK_MAPPINGS), choices=list(TASK_MAPPINGS))
    parser.add_argument("--types", nargs="+", default=None)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per model")
    parser.add_argument("--total", type=float, default=3600.0, help="seconds for the whole sweep")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    todo = pairs(args.tasks, args.types)
    from turbotrain.training.bf16_hint import measured_bf16_speedup

    measured_bf16_speedup()  # the bf16 hint's matmul timing, once here: every forked child inherits it
    header = [
        "| model type | task | status | loss diff | grad diff | param diff | passes applied | worst tensor / detail |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines, counts, start = list(header), {}, time.monotonic()
    for index, (model_type, task) in enumerate(todo, 1):
        left = args.total - (time.monotonic() - start)
        if left <= 0:
            status, outcome, detail = "skipped: sweep time budget spent", None, ""
        else:
            status, outcome, detail = run_one(model_type, task, args.steps, min(args.budget, left))
        key = status.split(":")[0]
        counts[key] = counts.get(key, 0) + 1
        lines.append(row(model_type, task, status, outcome, detail))
        elapsed = time.monotonic() - start
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        print(f"[{index}/{len(todo)} {elapsed:.0f} s] {model_type} {task}: {status}  ({summary})", file=sys.stderr)
        if args.out:
            with open(args.out, "w") as handle:
                handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print("\ncounts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
