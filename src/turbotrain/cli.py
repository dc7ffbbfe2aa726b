"""`turbotrain` command line: `run` (an unmodified Trainer script with turbotrain's classes), `pretrain`
(the main job), `bench` (side-by-side measurement) and `export` (a trained model directory -> verified
ONNX for deployment)."""

# Parsing imports neither torch nor Transformers: the parsers are built from plain data (PretrainConfig's
# defaults, pretrain.config.BACKEND_CHOICES, bench/flag_table.py, launch/option_table.py), so every `--help`
# answers in well under a second; a command imports what it runs once its arguments are parsed. Only `bench`
# (not asking for help) reads its flags from the registered workloads themselves (bench/flags.py).

from __future__ import annotations

import argparse
import sys


def _add_model_flags(parser: argparse.ArgumentParser, defaults) -> None:
    parser.add_argument("--hidden-size", type=int, default=defaults.hidden_size)
    parser.add_argument("--layers", type=int, default=defaults.num_layers, dest="num_layers")
    parser.add_argument("--heads", type=int, default=defaults.num_heads, dest="num_heads")
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--vocab-size", type=int, default=defaults.vocab_size)
    parser.add_argument("--seed", type=int, default=defaults.seed)


def _add_overwrite_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--overwrite", action="store_true", help=f"write into a folder that holds {what} (refused without it)"
    )


def _pretrain_parser(sub) -> None:
    from turbotrain.pretrain.config import BACKEND_CHOICES, BF16_CHOICES, PretrainConfig

    d = PretrainConfig()
    p = sub.add_parser("pretrain", help="pretrain a RoBERTa-style masked LM on the built-in corpus or your files")
    p.add_argument("--output-dir", default=d.output_dir)
    p.add_argument(
        "--files", nargs="+", default=[], metavar="TXT", help="UTF-8 text files instead of the built-in corpus"
    )
    p.add_argument(
        "--minutes",
        type=float,
        default=d.minutes,
        help="time budget for the whole job (default %(default)g): model, steps and schedule sized to it here",
    )
    p.add_argument("--steps", type=int, default=None, dest="max_steps", help="train exactly N steps (no budget)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: usable cores less busy ones)")
    p.add_argument("--lr", type=float, default=None, dest="learning_rate", help="default: the model's (2e-3)")
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help="default: 5%% of --steps")
    p.add_argument("--lr-scheduler", default=d.lr_scheduler, choices=["linear", "cosine", "constant_with_warmup"])
    p.add_argument("--dropout", type=float, default=d.dropout)
    p.add_argument(
        "--bf16", default=d.bf16, choices=BF16_CHOICES, help="bf16 autocast; auto: on with AMX-BF16 or a bf16 GPU"
    )
    p.add_argument("--logging-steps", type=int, default=d.logging_steps)
    p.add_argument("--eval-steps", type=int, default=None, help="held-out evaluation every N steps (1/8 of the run)")
    p.add_argument("--save-steps", type=int, default=None, help="committed checkpoint every N steps (1/8 of the run)")
    p.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint in OUTPUT_DIR")
    _add_overwrite_flag(p, "an earlier run (weights, checkpoints): train into it")
    p.add_argument(
        "--compare",
        action="store_true",
        help="first train the same model with stock Trainer and report time to the same held-out loss",
    )
    p.add_argument("--no-plot", action="store_false", dest="plot", help="do not write OUTPUT_DIR/loss.png")
    p.add_argument("--backend", default=d.backend, choices=BACKEND_CHOICES)
    p.add_argument("--no-label-sparsity", action="store_false", dest="label_sparsity")
    p.add_argument("--quiet", action="store_false", dest="progress")
    p.add_argument(
        "--export-onnx",
        action="store_true",
        help="also export the trained model to OUTPUT_DIR/onnx (needs the onnx extra)",
    )
    _add_model_flags(p, d)


def _export_parser(sub) -> None:
    p = sub.add_parser("export", help="export a saved model (save_pretrained directory) to verified ONNX")
    p.add_argument("model_dir", help="directory written by save_pretrained / turbotrain pretrain")
    p.add_argument("out_dir", help="where to write model.onnx (and the tokenizer, when the model has one)")
    p.add_argument("--optimize", action="store_true", help="also write ONNX Runtime's fused model.optimized.onnx")
    p.add_argument(
        "--quantize",
        nargs="+",
        default=[],
        choices=["fp16", "int8"],
        help="also write model.fp16.onnx and/or model.int8.onnx",
    )
    p.add_argument(
        "--no-verify", action="store_false", dest="verify", help="skip the comparison with torch (not recommended)"
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="largest accepted |onnxruntime - torch| of the fp32 logits (default 1e-4)",
    )
    _add_overwrite_flag(p, "an earlier export: replace it whole")


def _bench_parser(sub, live: bool = False) -> None:
    from turbotrain.bench.flags import add_workload_flags, static_table

    p = sub.add_parser(
        "bench",
        help="a workload's peers side by side, interleaved (stock Trainer, Trainer(torch_compile), TurboTrainer...)",
        description="Every workload's flags are its dataclass fields; --task picks one.",
    )
    p.add_argument("--out", default="bench-out", help="directory for bench.json, bench.md and bench.png")
    _add_overwrite_flag(p, "an earlier benchmark's reports")
    add_workload_flags(p, None if live else static_table())


def _run_pretrain(ns: argparse.Namespace) -> int:
    from turbotrain.pretrain import PretrainConfig, TrainingStopped, run_pretrain

    cfg = PretrainConfig(**{k: v for k, v in vars(ns).items() if k != "command"})
    try:
        return run_pretrain(cfg).exit_code
    except TrainingStopped as stopped:
        print(f"turbotrain pretrain: {stopped}", file=sys.stderr)
        return 1


def _run_bench(ns: argparse.Namespace) -> int:
    from turbotrain.bench.flags import workload_from_flags
    from turbotrain.bench.runner import run_bench

    flags = {k: v for k, v in vars(ns).items() if k not in {"command", "out", "overwrite"}}
    run_bench(workload_from_flags(flags), out_dir=ns.out, overwrite=ns.overwrite)
    return 0


def _run_export(ns: argparse.Namespace) -> int:
    from turbotrain.export.command import run_export

    return run_export(
        ns.model_dir,
        ns.out_dir,
        optimize=ns.optimize,
        quantize=tuple(ns.quantize),
        verify=ns.verify,
        tolerance=ns.tolerance,
        overwrite=ns.overwrite,
    )


def _ondevice_bench_parser(sub) -> None:
    p = sub.add_parser("bench-ondevice", help="on-device fine-tuning (onnxruntime + numpy) vs torch, interleaved")
    p.add_argument("--out", default="bench-ondevice")
    _add_overwrite_flag(p, "an earlier run's artifacts and ondevice.json")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument(
        "--trainable",
        nargs="+",
        default=["classifier.", "bert.pooler."],
        metavar="PREFIX",
        help="parameter-name prefixes to train (default: the classification head)",
    )


def _run_ondevice_bench(ns: argparse.Namespace) -> int:
    from turbotrain.bench.ondevice import OnDeviceBench, run_ondevice_bench

    cfg = OnDeviceBench(out=ns.out, rounds=ns.rounds, steps=ns.steps, trainable=tuple(ns.trainable))
    run_ondevice_bench(cfg, overwrite=ns.overwrite)
    return 0


def _profile_parser(sub, live: bool = False) -> None:
    from turbotrain.pretrain.shape import ModelShape

    if live:
        from turbotrain.bench.workloads.corpus_lm import CorpusLM

    p = sub.add_parser("profile-ort", help="ONNX Runtime kernel time by op type for the mlm benchmark workload")
    p.add_argument("--out", default="profile-ort")
    _add_overwrite_flag(p, "an earlier profile")
    p.add_argument("--steps", type=int, default=5)
    _add_model_flags(p, CorpusLM(task="mlm") if live else ModelShape())  # the help shows no defaults


def _run_profile(ns: argparse.Namespace) -> int:
    from turbotrain.bench.ort_profile import profile_onnxruntime
    from turbotrain.bench.workloads.corpus_lm import CorpusLM

    fields = {k: v for k, v in vars(ns).items() if k not in {"command", "out", "steps", "overwrite"}}
    profile_onnxruntime(CorpusLM(task="mlm", **fields), steps=ns.steps, out_dir=ns.out, overwrite=ns.overwrite)
    return 0


def _run_parser(sub) -> None:
    # parsed by turbotrain.launch (its options come from TurboOptions; the script's own arguments follow)
    sub.add_parser("run", add_help=False, help="run an unmodified Trainer script with turbotrain: run script.py [args]")


def _parser(command: str | None) -> argparse.ArgumentParser:
    """Every subcommand's parser; `command` (None for help) reads its own flags live where they have a table."""
    parser = argparse.ArgumentParser(prog="turbotrain", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _run_parser(sub)
    _pretrain_parser(sub)
    _bench_parser(sub, live=command == "bench")
    _export_parser(sub)
    _ondevice_bench_parser(sub)
    _profile_parser(sub, live=command == "profile-ort")
    return parser


COMMANDS = {
    "pretrain": _run_pretrain,
    "bench": _run_bench,
    "export": _run_export,
    "bench-ondevice": _run_ondevice_bench,
    "profile-ort": _run_profile,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        from turbotrain.launch import main as run_main

        return run_main(argv[1:])
    ns = _parser(None if not argv or "-h" in argv or "--help" in argv else argv[0]).parse_args(argv)
    from turbotrain.data.corpus import CorpusError
    from turbotrain.utils.warnings import quiet_cpu_pin_memory

    quiet_cpu_pin_memory()

    try:
        return COMMANDS[ns.command](ns)
    except (CorpusError, ImportError, ValueError, OSError) as error:
        print(f"turbotrain {ns.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before training (corpus, tokenizer); during it, the job saves and stops itself
        print(f"turbotrain {ns.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
