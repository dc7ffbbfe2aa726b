"""Per-step time of stock Trainer and TurboTrainer under DeepSpeed ZeRO-3 (2 processes) and in one process, same data.

    # ZeRO-3, 2 ranks x 1 thread, 8 rows each (a global batch of 16):
    torchrun --nproc_per_node=2 benchmarks/scripts/zero3_speedup.py --engine zero3 --out zero3.json
    # one process, 2 threads, 16 rows:
    OMP_NUM_THREADS=2 python benchmarks/scripts/zero3_speedup.py --engine none --out single.json

Model: Llama-shaped, vocabulary 32,000, hidden 256, 4 layers, 8 heads (4 key/value), untied head; data:
completion-only rows of 64 to 256 tokens (the first half a prompt with labels -100), right-padded per batch
(tests/scale/sharded_worker.py's rows, longer). Each round runs stock, then turbotrain (defaults: label sparsity,
chunked cross-entropy "auto", padding-free), `--steps` optimizer steps each; a step's time is Trainer's
`on_step_begin` to `on_step_end` on rank 0 (the ranks meet every step in the engine's collectives), the first
step left out (warm-up). Per run the median step; the figure is the median over rounds, and turbo's speed-up
stock / turbo. Writes JSON: per mode the per-round medians, the medians, the speed-up, and turbotrain's summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from datasets import Dataset  # noqa: E402
from tests.scale.sharded_worker import ZERO3, config  # noqa: E402
from tests.trainer_helpers import RightPaddingCollator  # noqa: E402
from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from turbotrain import TurboTrainer, TurboTrainingArguments  # noqa: E402

SIZES = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4)


class StepTimes(TrainerCallback):
    def __init__(self):
        self.times: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self.start)


def rows(n: int, seed: int = 0) -> Dataset:
    generator = torch.Generator().manual_seed(seed)
    vocab = config().vocab_size
    data = {"input_ids": [], "labels": []}
    for length in torch.randint(64, 257, (n,), generator=generator).tolist():
        ids = torch.randint(3, vocab, (length,), generator=generator).tolist()
        data["input_ids"].append(ids)
        data["labels"].append([-100] * (length // 2) + ids[length // 2 :])
    return Dataset.from_dict(data)


def one_run(engine: str, turbo: bool, per_device: int, steps: int, out: Path) -> tuple[float, str | None]:
    arguments = dict(
        output_dir=str(out / ("turbo" if turbo else "stock")),
        per_device_train_batch_size=per_device,
        max_steps=steps,
        learning_rate=1e-4,
        logging_steps=steps,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),  # as TurboTrainingArguments sets for CPU-only torchrun (args.py)
        **({"deepspeed": ZERO3} if engine == "zero3" else {}),
    )
    args = TurboTrainingArguments(**arguments) if turbo else TrainingArguments(**arguments)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config().__class__(**{**config().to_dict(), **SIZES}))
    trainer = (TurboTrainer if turbo else Trainer)(
        model=model, args=args, train_dataset=rows(per_device * steps * 2), data_collator=RightPaddingCollator(0)
    )
    times = StepTimes()
    trainer.add_callback(times)
    trainer.train()
    return statistics.median(times.times[1:]), (trainer.turbo_summary() if turbo else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("zero3", "none"), required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    options = parser.parse_args()
    per_device = 8 if options.engine == "zero3" else 16
    scratch = options.out.with_suffix(".runs")
    medians: dict[str, list[float]] = {"stock": [], "turbo": []}
    summary = None
    for _ in range(options.rounds):
        for mode in ("stock", "turbo"):
            seconds, said = one_run(options.engine, mode == "turbo", per_device, options.steps, scratch)
            medians[mode].append(seconds)
            summary = said or summary
    if not dist.is_initialized() or dist.get_rank() == 0:
        stock, turbo = (statistics.median(medians[m]) for m in ("stock", "turbo"))
        result = {
            "engine": options.engine,
            "per_device_rows": per_device,
            "threads": torch.get_num_threads(),
            "world_size": dist.get_world_size() if dist.is_initialized() else 1,
            "per_round_s": medians,
            "stock_s": stock,
            "turbo_s": turbo,
            "speedup": stock / turbo,
            "summary": summary,
        }
        options.out.write_text(json.dumps(result, indent=1))
        print(json.dumps(result, indent=1))
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
