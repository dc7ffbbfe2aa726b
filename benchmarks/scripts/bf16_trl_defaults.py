"""TRL's SFT defaults (bf16 autocast, gradient checkpointing) on a CPU: stock `SFTTrainer` against `TurboSFTTrainer`,
and `TurboTrainer(bf16=True)` against `TurboTrainer` in fp32 (issue 38's goals).

The sft workload (bench/workloads/sft.py, `--trl-defaults`): a Qwen2-shaped decoder, vocabulary 151,936, hidden 256,
4 layers, tied embeddings, completion-only chat rows cut to `--seq-len` tokens, batch 8, random weights (seed 0),
every side the same initial weights and batches. Each side trains in its own process (so its peak RSS is its own:
VmHWM reset as training starts, measure/memory.py), the sides interleaved round by round (A B A B ...), `--warmup`
unmeasured steps then `--steps` timed ones per round; per side the median of its timed steps, and the ratio of the
medians. Parts:

* `speed`: `trl` (stock `SFTTrainer`) and `trl+turbo` (`turbo(SFTTrainer)`): seconds per step, peak RSS;
* `losses`: the same two sides for `--loss-steps` steps on rows cut to `--loss-seq-len` tokens (shorter: stock's
  bf16 steps are slow), every step's loss and the largest relative difference;
* `trainer`: `turbo` (`TurboTrainer`) with `bf16=True` and in fp32 (no gradient checkpointing, as Trainer's
  default): seconds per step.

    flock /tmp/turbotrain-cpu.lock env PYTHONPATH=src python benchmarks/scripts/bf16_trl_defaults.py \\
        --parts speed losses trainer --out /tmp/bf16_trl_defaults.json

Prints one JSON object per finished process and, at the end, the summary (also written to `--out`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

SIDES = {  # side -> (workload peer, --bf16 for the workload)
    "trl": ("trl", False),
    "trl+turbo": ("trl+turbo", False),
    "turbo-bf16": ("turbo", True),
    "turbo-fp32": ("turbo", False),
}
PARTS = {"speed": ("trl", "trl+turbo"), "losses": ("trl", "trl+turbo"), "trainer": ("turbo-fp32", "turbo-bf16")}


def worker(side: str, steps: int, seq_len: int, batch_size: int) -> dict:
    """Train one side for `steps` steps in this process; its step seconds, losses and peak RSS."""
    import torch

    from turbotrain.bench.counting import BatchCounter
    from turbotrain.bench.workloads import make_workload
    from turbotrain.measure.memory import PeakMemory

    peer, bf16 = SIDES[side]
    workload = make_workload(
        "sft",
        peers=(peer,),
        vocab_size=151_936,
        seq_len=seq_len,
        batch_size=batch_size,
        bf16=bf16,
        trl_defaults=True,
        rounds=1,
        steps=steps,
        warmup=0,
    )
    model, data = workload.model(), workload.data()
    memory = PeakMemory(torch.device("cpu"))
    with tempfile.TemporaryDirectory() as scratch:
        memory.release_freed()
        held = memory.current_mb()
        run = workload.trainer(peer, model, data, BatchCounter(step_work=workload.step_work), scratch)
        memory.reset()
        record = run.train()
        peak = memory.peak_mb()
    trainer = run.trainer
    return {
        "side": side,
        "seconds": record.seconds,
        "losses": record.losses,
        "peak_rss_mb": peak,
        "held_before_mb": held,
        "backend": record.backend,
        "passes": record.passes,
        "bf16": trainer.args.bf16,
        "gradient_checkpointing": trainer.args.gradient_checkpointing,
        "bf16_emulated": getattr(trainer, "turbo_bf16_emulation", None),
        "command": workload.command(),
    }


def run_side(side: str, steps: int, seq_len: int, batch_size: int) -> dict:
    command = [sys.executable, __file__, "--worker", side, "--steps", str(steps), "--seq-len", str(seq_len)]
    command += ["--batch-size", str(batch_size)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{side} failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps({k: v for k, v in result.items() if k != "command"}), flush=True)
    return result


def timed_part(sides: tuple[str, str], args) -> dict:
    """Interleaved rounds of the two sides; medians of the timed steps, peak RSS, ratio reference / other."""
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    for _ in range(args.rounds):
        for side in sides:
            runs[side].append(run_side(side, args.warmup + args.steps, args.seq_len, args.batch_size))
    summary = {}
    for side, results in runs.items():
        timed = [s for result in results for s in result["seconds"][args.warmup :]]
        summary[side] = {
            "median_step_s": statistics.median(timed),
            "timed_steps_s": timed,
            "peak_rss_mb": max(result["peak_rss_mb"] for result in results),
            "losses": results[0]["losses"],
            **{k: results[0][k] for k in ("backend", "passes", "bf16", "gradient_checkpointing", "bf16_emulated")},
        }
    reference, other = sides
    summary["speedup"] = summary[reference]["median_step_s"] / summary[other]["median_step_s"]
    summary["rss_ratio"] = summary[other]["peak_rss_mb"] / summary[reference]["peak_rss_mb"]
    return summary


def loss_part(args) -> dict:
    stock = run_side("trl", args.loss_steps, args.loss_seq_len, args.batch_size)
    turbo = run_side("trl+turbo", args.loss_steps, args.loss_seq_len, args.batch_size)
    relative = [abs(a - b) / abs(b) for a, b in zip(turbo["losses"], stock["losses"], strict=True)]
    return {
        "stock": stock["losses"],
        "turbo": turbo["losses"],
        "max_rel_diff": max(relative),
        "seq_len": args.loss_seq_len,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--loss-steps", type=int, default=10)
    parser.add_argument("--loss-seq-len", type=int, default=128)
    parser.add_argument("--out", default=None)
    parser.add_argument("--worker", choices=list(SIDES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, args.seq_len, args.batch_size)))
        return
    summary = {}
    for part in args.parts:
        summary[part] = loss_part(args) if part == "losses" else timed_part(PARTS[part], args)
        print(json.dumps({part: summary[part]}), flush=True)
    if args.out:
        with open(args.out, "w") as out:
            json.dump(summary, out, indent=1)


if __name__ == "__main__":
    main()
