"""`turbotrain` command line: `pretrain` (the main job), `bench` (side-by-side measurement) and `export`
(a trained model directory -> verified ONNX for deployment)."""

from __future__ import annotations

import argparse
import sys

from turbotrain.backends import valid_choices


def _add_model_flags(parser: argparse.ArgumentParser, defaults) -> None:
    parser.add_argument("--hidden-size", type=int, default=defaults.hidden_size)
    parser.add_argument("--layers", type=int, default=defaults.num_layers, dest="num_layers")
    parser.add_argument("--heads", type=int, default=defaults.num_heads, dest="num_heads")
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--vocab-size", type=int, default=defaults.vocab_size)
    parser.add_argument("--seed", type=int, default=defaults.seed)


def _pretrain_parser(sub) -> None:
    from turbotrain.pretrain import PretrainConfig

    d = PretrainConfig()
    p = sub.add_parser("pretrain", help="pretrain a RoBERTa-style masked LM on the built-in corpus or your files")
    p.add_argument("--output-dir", default=d.output_dir)
    p.add_argument(
        "--files", nargs="+", default=[], metavar="TXT", help="UTF-8 text files instead of the built-in corpus"
    )
    p.add_argument("--steps", type=int, default=d.max_steps, dest="max_steps")
    p.add_argument("--lr", type=float, default=d.learning_rate, dest="learning_rate")
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help="default: 5%% of --steps")
    p.add_argument("--lr-scheduler", default=d.lr_scheduler, choices=["linear", "cosine", "constant_with_warmup"])
    p.add_argument("--dropout", type=float, default=d.dropout)
    p.add_argument("--logging-steps", type=int, default=d.logging_steps)
    p.add_argument("--eval-steps", type=int, default=d.eval_steps, help="held-out evaluation every N steps")
    p.add_argument("--save-steps", type=int, default=d.save_steps, help="committed checkpoint every N steps")
    p.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint in OUTPUT_DIR")
    p.add_argument(
        "--compare",
        action="store_true",
        help="first train the same model with stock Trainer and report time to the same held-out loss",
    )
    p.add_argument("--no-plot", action="store_false", dest="plot", help="do not write OUTPUT_DIR/loss.png")
    p.add_argument("--backend", default=d.backend, choices=valid_choices())
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


def _bench_parser(sub) -> None:
    from turbotrain.bench.workload import Workload

    d = Workload()
    p = sub.add_parser("bench", help="stock Trainer vs Trainer(torch_compile) vs TurboTrainer, interleaved")
    p.add_argument("--out", default="bench-out", help="directory for the JSON and markdown results")
    p.add_argument("--rounds", type=int, default=d.rounds)
    p.add_argument("--steps", type=int, default=d.steps, help="measured steps per round and peer")
    p.add_argument("--warmup", type=int, default=d.warmup, help="unmeasured steps at the start of each round")
    p.add_argument(
        "--peers",
        nargs="+",
        default=list(d.peers),
        help="subset of: stock compiled turbo turbo:<backend> (e.g. turbo:onnxruntime turbo:inductor)",
    )
    p.add_argument("--backend", default=d.backend, choices=valid_choices(), help="TurboTrainer's backend")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast for every peer")
    p.add_argument(
        "--lengths",
        default=d.lengths,
        choices=["fixed", "variable", "long"],
        help="fixed blocks, or paragraphs at their natural lengths with dynamic padding; long (sft): long-tailed "
        "rows up to 4,096 tokens, every token labelled",
    )
    p.add_argument(
        "--task",
        default=d.task,
        choices=["mlm", "cls", "clm", "sft"],
        help="cls and sft need --lengths variable; clm: GPT-2 causal LM on fixed blocks; "
        "sft: decoder fine-tuning, peers stock trl trl+turbo turbo",
    )
    p.add_argument("--lora", action="store_true", help="sft: train PEFT LoRA adapters only")
    p.add_argument("--untied", action="store_true", help="sft: separate input and output embeddings")
    p.add_argument("--dropout", type=float, default=None, help="default: 0.1 for fixed lengths, 0 for variable")
    p.add_argument(
        "--turbo-off",
        nargs="+",
        default=[],
        metavar="PASS",
        help="turn passes off for the turbo peer (ablation): label_sparsity padding_free embedding_grad "
        "fused_optimizer fused_activation",
    )
    _add_model_flags(p, d)


def _run_pretrain(ns: argparse.Namespace) -> int:
    from turbotrain.pretrain import PretrainConfig, TrainingStopped, run_pretrain

    cfg = PretrainConfig(**{k: v for k, v in vars(ns).items() if k != "command"})
    try:
        return run_pretrain(cfg).exit_code
    except TrainingStopped as stopped:
        print(f"turbotrain pretrain: {stopped}", file=sys.stderr)
        return 1


def _run_bench(ns: argparse.Namespace) -> int:
    from turbotrain.bench.runner import run_bench
    from turbotrain.bench.workload import Workload

    fields = {k: v for k, v in vars(ns).items() if k not in {"command", "out"}}
    fields["peers"] = tuple(fields["peers"])
    fields["turbo_off"] = tuple(fields["turbo_off"])
    run_bench(Workload(**fields), out_dir=ns.out)
    return 0


def _run_export(ns: argparse.Namespace) -> int:
    from turbotrain.export.cli import run_export

    return run_export(
        ns.model_dir,
        ns.out_dir,
        optimize=ns.optimize,
        quantize=tuple(ns.quantize),
        verify=ns.verify,
        tolerance=ns.tolerance,
    )


def _ondevice_bench_parser(sub) -> None:
    p = sub.add_parser("bench-ondevice", help="on-device fine-tuning (onnxruntime + numpy) vs torch, interleaved")
    p.add_argument("--out", default="bench-ondevice")
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

    run_ondevice_bench(OnDeviceBench(out=ns.out, rounds=ns.rounds, steps=ns.steps, trainable=tuple(ns.trainable)))
    return 0


def _profile_parser(sub) -> None:
    from turbotrain.bench.workload import Workload

    p = sub.add_parser("profile-ort", help="ONNX Runtime kernel time by op type for the benchmark workload")
    p.add_argument("--out", default="profile-ort")
    p.add_argument("--steps", type=int, default=5)
    _add_model_flags(p, Workload())


def _run_profile(ns: argparse.Namespace) -> int:
    from turbotrain.bench.ort_profile import profile_onnxruntime
    from turbotrain.bench.workload import Workload

    fields = {k: v for k, v in vars(ns).items() if k not in {"command", "out", "steps"}}
    profile_onnxruntime(Workload(**fields), steps=ns.steps, out_dir=ns.out)
    return 0


def _seq2seq_bench_parser(sub) -> None:
    from dataclasses import fields

    from turbotrain.bench.seq2seq import Seq2SeqBench

    p = sub.add_parser("bench-seq2seq", help="stock Seq2SeqTrainer vs turbotrain on asr (Whisper) or bart, interleaved")
    p.add_argument("--out", default="bench-seq2seq")
    for f in fields(Seq2SeqBench):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "peers":
            p.add_argument(flag, nargs="+", default=list(f.default), help="stock, turbo, turbo:<backend>")
        elif isinstance(f.default, bool):
            p.add_argument(flag, action="store_true")
        else:
            p.add_argument(flag, type=type(f.default), default=f.default)


def _run_seq2seq_bench(ns: argparse.Namespace) -> int:
    from turbotrain.bench.seq2seq import Seq2SeqBench, run_seq2seq_bench

    fields = {k: v for k, v in vars(ns).items() if k not in {"command", "out"}}
    run_seq2seq_bench(Seq2SeqBench(**{**fields, "peers": tuple(ns.peers)}), out_dir=ns.out)
    return 0


def _unet_bench_parser(sub) -> None:
    p = sub.add_parser("bench-unet", help="a diffusers UNet training step on eager / inductor / onnxruntime")
    p.add_argument("--out", default="bench-unet")
    p.add_argument("--backends", nargs="+", default=["eager", "inductor", "onnxruntime"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--channels", type=int, nargs="+", default=[32, 64], help="channels per UNet block")


def _run_unet_bench(ns: argparse.Namespace) -> int:
    from turbotrain.bench.unet import UNetBench, run_unet_bench

    run_unet_bench(
        UNetBench(
            backends=tuple(ns.backends),
            rounds=ns.rounds,
            steps=ns.steps,
            batch_size=ns.batch_size,
            channels=tuple(ns.channels),
        ),
        out_dir=ns.out,
    )
    return 0


COMMANDS = {
    "pretrain": _run_pretrain,
    "bench": _run_bench,
    "export": _run_export,
    "bench-ondevice": _run_ondevice_bench,
    "profile-ort": _run_profile,
    "bench-seq2seq": _run_seq2seq_bench,
    "bench-unet": _run_unet_bench,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="turbotrain", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _pretrain_parser(sub)
    _bench_parser(sub)
    _export_parser(sub)
    _ondevice_bench_parser(sub)
    _profile_parser(sub)
    _seq2seq_bench_parser(sub)
    _unet_bench_parser(sub)
    ns = parser.parse_args(argv)
    from turbotrain.data.corpus import CorpusError

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
