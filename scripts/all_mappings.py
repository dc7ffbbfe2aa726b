"""Every model class of Transformers' auto task mappings, built tiny: `optimize()` and `TurboTrainer` must never
raise where stock `Trainer` runs (issue 27).

    PYTHONPATH=src nice -n 19 python scripts/all_mappings.py [--mappings CTC IMAGE_CLASSIFICATION ...]
        [--budget 60] [--total 3600] [--out all-mappings.md]

`mapping_classes()` lists each class of every `MODEL_FOR_*_MAPPING_NAMES` once (audio, vision, video,
multimodal, time series, text; the first mapping that names a class, in sorted order, is its row).
`construct(row)` builds it from the family's tiny config (`scripts/tiny_configs.py`), then:
1. `turbotrain.optimize(model)`, then `report.undo()`;
2. stock `Trainer` and `TurboTrainer` built on copies of the same weights;
3. where the mapping is a task the sweep makes data for (`architectures.TASK_MAPPINGS`): one training step
   of each (stock first; a stock step that fails ends the row as `stock failed`).
Status: `ok` (with the passes applied), `turbo crashed` (the exception), `stock failed`, `skipped: why`.
`scripts/all_mappings.py` runs each row in a forked child with its own time budget (architecture_sweep's
`run_one`); `tests/test_all_mappings.py` runs a sample in-process.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

import transformers
from transformers import PrinterCallback, Trainer, TrainingArguments
from transformers.models.auto import modeling_auto

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.architectures import TASK_MAPPINGS, Skip, build_class, examples  # noqa: E402
from scripts.task_inputs import MEDIA_TASKS, MediaCollator  # noqa: E402

PREFIX, SUFFIX = "MODEL_FOR_", "_MAPPING_NAMES"
MAX_PARAMETERS = 25_000_000  # construction and one step of batch 2: a family the shrink leaves at 6-20M still runs
TASK_OF_MAPPING = {mapping: task for task, mapping in TASK_MAPPINGS.items()}


@dataclass(frozen=True)
class Row:
    mapping: str  # short: "CTC" for MODEL_FOR_CTC_MAPPING_NAMES
    model_type: str
    class_name: str

    @property
    def task(self) -> str | None:
        return TASK_OF_MAPPING.get(f"{PREFIX}{self.mapping}{SUFFIX}")


@dataclass
class Result:
    status: str
    detail: str = ""
    applied: list[str] = field(default_factory=list)
    stepped: bool = False


# families tried first where a mapping is sampled (tests/test_all_mappings.py): the most used, then the rest in order
FAMILY_PRIORITY = (
    "bert roberta distilbert gpt2 llama t5 bart vit resnet convnext swin deit beit segformer detr yolos clip siglip "
    "blip wav2vec2 hubert whisper audio-spectrogram-transformer videomae patchtst timesfm mobilenet_v2 dpt glpn sam"
).split()


def ranked(rows: list[Row]) -> list[Row]:
    """`rows` with FAMILY_PRIORITY's families first (in that order), the others after, in mapping order."""
    rank = {name: index for index, name in enumerate(FAMILY_PRIORITY)}
    return sorted(rows, key=lambda row: rank.get(row.model_type, len(rank)))


def mapping_names() -> list[str]:
    return sorted(n for n in dir(modeling_auto) if n.startswith(PREFIX) and n.endswith(SUFFIX))


def mapping_classes(mappings: list[str] | None = None) -> list[Row]:
    """One row per class of the task mappings (`mappings`: short names such as "CTC"; default all)."""
    rows, seen = [], set()
    for attribute in mapping_names():
        short = attribute[len(PREFIX) : -len(SUFFIX)]
        if mappings is not None and short not in mappings:
            continue
        for model_type, names in getattr(modeling_auto, attribute).items():
            for name in (names,) if isinstance(names, str) else names:
                if name not in seen:
                    seen.add(name)
                    rows.append(Row(short, model_type, name))
    return rows


def _arguments(args_class, output_dir: str, **extra):
    return args_class(
        output_dir=output_dir,
        per_device_train_batch_size=2,
        max_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        use_cpu=True,
        **extra,
    )


def _data(model, task: str | None):
    """(examples, collator) for one step, or (None, None) where the sweep makes no data for this mapping."""
    if task is None:
        return None, None
    from scripts.architectures import PadCollator

    pad = getattr(model.config, "pad_token_id", None)
    pad = pad if isinstance(pad, int) else 0
    try:
        rows = examples(model, task, count=2)
    except Exception:
        return None, None  # inputs this builder cannot make for the family: construction only
    return rows, MediaCollator(pad) if task in MEDIA_TASKS else PadCollator(pad)


def construct(row: Row, step: bool = True) -> Result:
    """Build `row`'s class tiny; optimize it, build both trainers, train one step each where data is made."""
    from turbotrain import TurboTrainer, TurboTrainingArguments, optimize

    model_class = getattr(transformers, row.class_name, None)
    if model_class is None:
        return Result("skipped: class not in transformers")
    try:
        model = build_class(model_class, row.model_type, max_parameters=MAX_PARAMETERS)
    except Skip as reason:
        return Result(f"skipped: {reason}")
    stock_model, turbo_model = copy.deepcopy(model), copy.deepcopy(model)
    data, collator = _data(model, row.task) if step else (None, None)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            stock = Trainer(model=stock_model, args=_arguments(TrainingArguments, tmp), train_dataset=data,
                            data_collator=collator)  # fmt: skip
        except Exception as error:
            return Result("stock failed", f"Trainer(): {type(error).__name__}: {str(error)[:120]}")
        try:
            report = optimize(model)
            report.undo()
            turbo = TurboTrainer(model=turbo_model, args=_arguments(TurboTrainingArguments, tmp, backend="eager"),
                                 train_dataset=data, data_collator=collator)  # fmt: skip
        except Exception as error:
            return Result("turbo crashed", _crash(error))
        for trainer in (stock, turbo):
            trainer.remove_callback(PrinterCallback)
        applied = list(turbo.turbo_report.applied) if turbo.turbo_report is not None else []
        if data is None:
            return Result("ok", applied=applied)
        try:
            stock.train()
        except Exception as error:
            return Result("stock failed", f"step: {type(error).__name__}: {str(error)[:120]}", applied)
        try:
            turbo.train()
        except Exception as error:
            return Result("turbo crashed", "step: " + _crash(error), applied)
    return Result("ok", applied=applied, stepped=True)


def _crash(error: Exception) -> str:
    tail = " / ".join(traceback.format_exc().strip().splitlines()[-4:])
    return f"{type(error).__name__}: {str(error)[:160]} | {tail}"


def _child(row: Row, queue) -> None:
    import logging
    import warnings

    import torch

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    logging.getLogger("turbotrain").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    try:
        queue.put(construct(row))
    except Exception as error:  # construct() catches turbotrain's; this is the harness's own
        queue.put(Result("harness error", _crash(error)))


def run_one(row: Row, budget: float) -> Result:
    import multiprocessing

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(row, queue))
    child.start()
    try:
        return queue.get(timeout=budget)
    except Exception:
        return Result("timeout", f"over {budget:.0f} s")
    finally:
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join()


def table_row(row: Row, result: Result) -> str:
    detail = " ".join(result.detail.split()).replace("|", "/")
    step = "yes" if result.stepped else ""
    return (
        f"| {row.mapping} | {row.model_type} | {row.class_name} | {result.status} | {step} | "
        f"{', '.join(result.applied) or ''} | {detail} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mappings", nargs="+", default=None, help='short names, e.g. "CTC" "IMAGE_CLASSIFICATION"')
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per class")
    parser.add_argument("--total", type=float, default=3600.0, help="seconds for the whole run")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    rows = mapping_classes(args.mappings)
    from turbotrain.training.bf16_hint import measured_bf16_speedup

    measured_bf16_speedup()  # the bf16 hint's matmul timing, once here: every forked child inherits it
    lines = [
        "| mapping | model type | class | status | step | passes applied | detail |",
        "|---|---|---|---|---|---|---|",
    ]
    counts: dict[str, int] = {}
    start = time.monotonic()
    for index, row in enumerate(rows, 1):
        left = args.total - (time.monotonic() - start)
        result = run_one(row, min(args.budget, left)) if left > 0 else Result("skipped: run time budget spent")
        key = result.status.split(":")[0]
        counts[key] = counts.get(key, 0) + 1
        lines.append(table_row(row, result))
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        print(f"[{index}/{len(rows)} {time.monotonic() - start:.0f} s] {row.class_name}: {result.status}  ({summary})",
              file=sys.stderr)  # fmt: skip
        if args.out:
            with open(args.out, "w") as handle:
                handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print("\ncounts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
