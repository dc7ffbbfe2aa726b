"""The GPU check's benchmark part: TurboTrainer against the peers a GPU user would pick, on five workloads.

Workloads (bf16 autocast on CUDA; models from configs, data made here, nothing downloaded):
* sft: Qwen2 layout (hidden 896, 8 layers, 14 heads / 2 key-value heads, SwiGLU 4,864, tied head over
  Qwen2's vocabulary of 151,936), chat-shaped rows: a prompt of 16-128 tokens (labels -100) and a
  completion of long-tailed length (log-normal, median 200), at most 2,048 tokens; batch 8.
* sft-lora: the same, PEFT LoRA r=16 on q/k/v/o and the MLP projections (only the adapters train).
* clm: GPT-2 small (768, 12 layers, vocabulary 50,257), fixed blocks of 1,024 tokens, every one labelled.
* mlm: RoBERTa-base layout (768, 12 layers, vocabulary 50,265), natural lengths (log-normal, median 128,
  at most 512), 15% of tokens masked and labelled; batch 16.
* asr: Whisper-base layout (512, 6 + 6 layers, vocabulary 51,865), 30 s of random log-mel features, targets
  of 10-120 tokens; batch 8.
Peers, built as a user writes them, same weights, same batches in the same order: `stock (sdpa)`;
`stock (flash_attention_2)` where flash-attn imports; `stock + flattening` (DataCollatorWithFlattening:
position_ids, no mask); `trl padding_free` (TRL SFTTrainer, padding_free=True, completion-only loss; sft
tasks); `torch_compile` (Trainer(torch_compile=True)); `liger` (use_liger_kernel=True, where liger-kernel is
installed and has kernels for the model: Qwen2); `turbotrain` (TurboTrainer, default options).
Measured per peer: `warmup` untimed steps, then `steps` timed (CUDA synchronised at every step boundary).
tokens/s: real (unpadded) input tokens per second (asr: target tokens); MFU: the FLOPs the batch needs
(measure/flops.py with packed=True, sparse_head=True: real tokens through the body, labelled rows through
the head, Σ length² of attention; asr: encoder frames, decoder tokens and cross-attention added) per
second over the H200's dense bf16 peak, 989.4 TFLOP/s (datasheet; ~790 measured on random data here), the
same numerator for every peer; peak memory: torch.cuda.max_memory_allocated; loss vs stock: the largest
relative difference from stock's loss at the same step.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import importlib.util
import math
import statistics
import tempfile
import time
from dataclasses import dataclass

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_callback import PrinterCallback

from turbotrain import TurboTrainer, TurboTrainingArguments
from turbotrain.measure.flops import ModelFlops, batch_work, step_flops

H200_BF16_PEAK = 989.4e12
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PEERS = (
    "stock (sdpa)",
    "turbotrain",
    "stock (flash_attention_2)",
    "stock + flattening",
    "trl padding_free",
    "liger",
    "torch_compile",
)
TASKS = ("sft", "sft-lora", "clm", "mlm", "asr")
QUICK_PEERS = {  # --quick: every peer kind at least once, at tiny sizes
    "sft": ("stock (sdpa)", "turbotrain", "stock + flattening", "trl padding_free", "liger"),
    "sft-lora": ("stock (sdpa)", "turbotrain"),
    "clm": ("stock (sdpa)", "turbotrain", "torch_compile", "stock (flash_attention_2)"),
    "mlm": ("stock (sdpa)", "turbotrain", "stock + flattening"),
    "asr": ("stock (sdpa)", "turbotrain"),
}


@dataclass(frozen=True)
class Sizes:
    hidden: int
    layers: int
    heads: int
    batch: int
    max_len: int
    warmup: int
    steps: int


FULL = {
    "sft": Sizes(896, 8, 14, 8, 2048, 3, 10),
    "clm": Sizes(768, 12, 12, 8, 1024, 3, 10),
    "mlm": Sizes(768, 12, 12, 16, 512, 3, 10),
    "asr": Sizes(512, 6, 8, 8, 120, 3, 10),
}
QUICK = {
    "sft": Sizes(32, 2, 4, 4, 64, 1, 1),
    "clm": Sizes(32, 2, 4, 4, 32, 1, 1),
    "mlm": Sizes(32, 2, 4, 4, 32, 1, 1),
    "asr": Sizes(32, 2, 4, 4, 16, 1, 1),
}


def sizes_of(task: str, quick: bool) -> Sizes:
    return (QUICK if quick else FULL)["sft" if task.startswith("sft") else task]


# --- models and data --------------------------------------------------------------------------------------------


def build_model(task: str, quick: bool):
    import transformers as tf

    s = sizes_of(task, quick)
    torch.manual_seed(0)
    if task.startswith("sft"):
        config = tf.Qwen2Config(
            vocab_size=151_936, hidden_size=s.hidden, num_hidden_layers=s.layers, num_attention_heads=s.heads,
            num_key_value_heads=2, intermediate_size=4864 if not quick else 4 * s.hidden,
            max_position_embeddings=4096, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        )  # fmt: skip
        model = tf.Qwen2ForCausalLM(config)
        if task == "sft-lora":
            from peft import LoraConfig, get_peft_model

            lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
            model = get_peft_model(model, lora)
        return model
    if task == "clm":
        config = tf.GPT2Config(
            vocab_size=50_257, n_embd=s.hidden, n_layer=s.layers, n_head=s.heads, n_positions=s.max_len,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0,
        )  # fmt: skip
        return tf.GPT2LMHeadModel(config)
    if task == "mlm":
        config = tf.RobertaConfig(
            vocab_size=50_265, hidden_size=s.hidden, num_hidden_layers=s.layers, num_attention_heads=s.heads,
            intermediate_size=4 * s.hidden, max_position_embeddings=s.max_len + 2, pad_token_id=1,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, type_vocab_size=1,
        )  # fmt: skip
        return tf.RobertaForMaskedLM(config)
    config = tf.WhisperConfig(
        vocab_size=51_865, d_model=s.hidden, encoder_layers=s.layers, decoder_layers=s.layers,
        encoder_attention_heads=s.heads, decoder_attention_heads=s.heads, encoder_ffn_dim=4 * s.hidden,
        decoder_ffn_dim=4 * s.hidden, num_mel_bins=80, max_source_positions=16 if quick else 1500,
        max_target_positions=448, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
    )  # fmt: skip
    return tf.WhisperForConditionalGeneration(config)


def build_examples(task: str, quick: bool, model) -> list[dict]:
    """(warmup + steps) x batch examples: token ids as lists, labels as the task wants them."""
    s = sizes_of(task, quick)
    generator = torch.Generator().manual_seed(1)
    count = (s.warmup + s.steps) * s.batch
    vocab = model.config.vocab_size

    def ids(n: int) -> list[int]:
        return torch.randint(3, min(vocab, 32_000), (n,), generator=generator).tolist()

    def long_tail(median: float, low: int, high: int) -> int:
        return int(min(high, max(low, math.exp(math.log(median) + 0.8 * torch.randn(1, generator=generator).item()))))

    examples = []
    for _ in range(count):
        if task.startswith("sft"):
            prompt = int(torch.randint(min(16, s.max_len // 4), max(17, s.max_len // 16), (1,), generator=generator))
            completion = long_tail(200 if not quick else 16, 4, s.max_len - prompt)
            tokens = ids(prompt + completion)
            examples.append({"input_ids": tokens, "labels": [-100] * prompt + tokens[prompt:], "prompt": prompt})
        elif task == "clm":
            tokens = ids(s.max_len)
            examples.append({"input_ids": tokens, "labels": list(tokens)})
        elif task == "mlm":
            tokens = ids(long_tail(128 if not quick else 16, 4, s.max_len))
            masked = torch.rand(len(tokens), generator=generator) < 0.15
            masked[0] = True  # at least one label per row
            labels = [t if m else -100 for t, m in zip(tokens, masked.tolist())]
            inputs = [4 if m else t for t, m in zip(tokens, masked.tolist())]  # id 4 stands for <mask>
            examples.append({"input_ids": inputs, "labels": labels})
        else:
            frames = 2 * model.config.max_source_positions
            features = torch.randn(80, frames, generator=generator)
            examples.append({"input_features": features, "labels": ids(long_tail(40, 10, s.max_len))})
    return examples


class PadCollator:
    """Dynamic padding to the longest of the batch: pad ids, attention mask, labels -100 (features stacked)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, features):
        batch = {}
        if "input_features" in features[0]:
            batch["input_features"] = torch.stack([f["input_features"] for f in features])
        else:
            longest = max(len(f["input_ids"]) for f in features)
            batch["input_ids"] = torch.tensor(
                [f["input_ids"] + [self.pad_id] * (longest - len(f["input_ids"])) for f in features]
            )
            batch["attention_mask"] = torch.tensor(
                [[1] * len(f["input_ids"]) + [0] * (longest - len(f["input_ids"])) for f in features]
            )
        longest = max(len(f["labels"]) for f in features)
        batch["labels"] = torch.tensor([f["labels"] + [-100] * (longest - len(f["labels"])) for f in features])
        return batch


class Counting:
    """The peer's collator, noting each batch's real tokens and the FLOPs it needs (same for every peer)."""

    def __init__(self, inner, task: str, model, pad_id: int):
        self.inner, self.task = inner, task
        self.flops_model = ModelFlops.of(model) if task != "asr" else None
        self.model, self.pad = model, PadCollator(pad_id)
        self.tokens: list[int] = []
        self.flops: list[float] = []

    def __call__(self, features):
        stripped = [{k: v for k, v in f.items() if k != "prompt"} for f in features]
        padded = self.pad([_with_labels(f) for f in stripped])
        if self.task == "asr":
            self.tokens.append(int((padded["labels"] != -100).sum()))
            self.flops.append(whisper_flops(self.model, padded))
        else:
            self.tokens.append(int(padded["attention_mask"].sum()))
            work = batch_work(padded, packed=True, sparse_head=True, causal=self.task != "mlm")
            self.flops.append(step_flops(self.flops_model, work))
        return self.inner(stripped)


def _with_labels(feature: dict) -> dict:
    """A feature with `labels` (TRL's rows carry a completion_mask instead: labelled where it is 1)."""
    if "labels" in feature or "completion_mask" not in feature:
        return feature
    labels = [t if m else -100 for t, m in zip(feature["input_ids"], feature["completion_mask"])]
    return {"input_ids": feature["input_ids"], "labels": labels}


def whisper_flops(model, padded: dict) -> float:
    """Encoder frames, decoder tokens, head on labelled rows, self- and cross-attention (forward x 3)."""
    config = model.config
    encoder = sum(p.numel() for p in model.model.encoder.parameters() if p.dim() > 1)
    decoder = sum(p.numel() for n, p in model.model.decoder.named_parameters() if p.dim() > 1 and "embed" not in n)
    rows, frames = padded["input_features"].shape[0], config.max_source_positions
    lengths = (padded["labels"] != -100).sum(dim=1)
    tokens = int(lengths.sum())
    body = 6.0 * (encoder * rows * frames + decoder * tokens)
    head = 6.0 * config.vocab_size * config.d_model * tokens
    h = config.d_model
    attention = (
        12.0
        * h
        * (
            config.encoder_layers * rows * frames**2
            + config.decoder_layers * int((lengths**2).sum())
            + config.decoder_layers * tokens * frames
        )
    )
    return body + head + attention


# --- peers ----------------------------------------------------------------------------------------------------


class StepTimes(TrainerCallback):
    def __init__(self):
        self.seconds: list[float] = []
        self.start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        _sync()
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        _sync()
        self.seconds.append(time.perf_counter() - self.start)


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def unavailable(task: str, peer: str) -> str | None:
    """Why `peer` cannot run `task` here (not installed, not meaningful), or None."""
    decoder = task in ("sft", "sft-lora", "clm")
    if peer == "stock (flash_attention_2)" and importlib.util.find_spec("flash_attn") is None:
        return "flash-attn not installed (no wheel for this torch/CUDA)"
    if peer == "stock (flash_attention_2)" and task == "asr":
        return "not run for asr"
    if peer == "stock + flattening" and task == "asr":
        return "no flattening for encoder-decoder inputs"
    if peer == "trl padding_free" and not task.startswith("sft"):
        return "TRL's SFTTrainer is for sft"
    if peer == "trl padding_free" and importlib.util.find_spec("trl") is None:
        return "trl not installed"
    if peer == "liger" and importlib.util.find_spec("liger_kernel") is None:
        return "liger-kernel not installed"
    if peer == "liger" and not task.startswith("sft"):
        return "no Liger kernels for this model type (GPT-2, RoBERTa, Whisper)"
    if peer == "stock + flattening" and not decoder and task != "mlm":
        return "n/a"
    return None


def common_arguments(output_dir: str, s: Sizes, device: torch.device, quick: bool) -> dict:
    return dict(
        output_dir=output_dir,
        per_device_train_batch_size=s.batch,
        max_steps=s.warmup + s.steps,
        learning_rate=1e-4,
        warmup_steps=0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
        bf16=device.type == "cuda",
        use_cpu=device.type == "cpu",
        remove_unused_columns=False,
        dataloader_num_workers=0,
    )


PADDING_FREE = {"padding_free": True, "completion_only_loss": True, "gradient_checkpointing": False}


def make_trainer(task, peer, model, examples, output_dir, device, quick, sizes: Sizes | None = None):
    """A trainer for `peer` on a copy of `model`, fed the examples through a counting collator."""
    from transformers import DataCollatorWithFlattening

    s = sizes or sizes_of(task, quick)
    model = copy.deepcopy(model)
    pad_id = model.config.pad_token_id if task != "asr" else 0
    kw = common_arguments(output_dir, s, device, quick)
    if peer == "trl padding_free":
        return _trl_trainer(model, examples, kw, pad_id, task)
    inner = PadCollator(pad_id)
    if peer == "stock + flattening":
        inner = DataCollatorWithFlattening(return_position_ids=True, separator_id=-100)
    if peer == "stock (flash_attention_2)":
        model.set_attn_implementation("flash_attention_2")
    counting = Counting(inner, task, model, pad_id)
    data = [{k: v for k, v in e.items() if k != "prompt"} for e in examples]
    if peer == "turbotrain (onnxruntime)":  # the real-shape section's backend peer
        kw["backend"] = "onnxruntime"
    if peer.endswith("torch_compile"):  # Trainer's own torch.compile; turbotrain's auto steps aside under it
        kw.update(torch_compile=True, torch_compile_backend="eager" if quick else "inductor")
    if "liger" in peer:  # `turbotrain + liger` (the realshape section's): TurboTrainer with Liger's kernels
        kw.update(use_liger_kernel=True)
    if peer.startswith("turbotrain"):
        return TurboTrainer(model=model, args=TurboTrainingArguments(**kw), train_dataset=data, data_collator=counting)
    return Trainer(model=model, args=TrainingArguments(**kw), train_dataset=data, data_collator=counting)


def _trl_trainer(model, examples, kw, pad_id, task, options: dict = PADDING_FREE, turbo_peer: bool = False):
    """TRL's SFTTrainer on the same token ids; `options` default to the `trl padding_free` peer's, `{}` keeps
    TRL's defaults (gradient checkpointing, its fused LM head); `turbo_peer`: turbo(SFTTrainer) instead."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast
    from trl import SFTConfig, SFTTrainer

    vocab = {"<pad>": pad_id, "<s>": 1, "</s>": 2, "<unk>": 3}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")), pad_token="<pad>", eos_token="</s>"
    )
    rows = {
        "input_ids": [e["input_ids"] for e in examples],
        "completion_mask": [[0] * e["prompt"] + [1] * (len(e["input_ids"]) - e["prompt"]) for e in examples],
    }
    if turbo_peer:
        from turbotrain import turbo, turbo_arguments

        SFTConfig, SFTTrainer = turbo_arguments(SFTConfig), turbo(SFTTrainer)  # noqa: N806
    args = SFTConfig(**kw, **options, max_length=None)
    trainer = SFTTrainer(model=model, args=args, train_dataset=in_memory_dataset(rows), processing_class=tokenizer)
    trainer.data_collator = Counting(trainer.data_collator, task, model, pad_id)
    return trainer


def in_memory_dataset(rows: dict):
    """A `datasets.Dataset` of `rows` with a fingerprint given, not hashed from the Arrow table: hashing it failed
    with the 2026-12-04 run's datasets 5.2 / dill 0.4.1 / pyarrow 24 on Python 3.12 (Can't pickle MonthDayNano)."""
    from datasets import Dataset
    from datasets.table import InMemoryTable

    return Dataset(InMemoryTable.from_pydict(rows), fingerprint=f"gpu-check-{id(rows):x}")


def run_peer(task: str, peer: str, model, examples, device: torch.device, quick: bool) -> dict:
    """Train one peer; tokens/s, MFU, peak memory, per-step losses (Liger's patches undone after its peer)."""
    s = sizes_of(task, quick)
    with isolated(peer):
        return measure(lambda tmp: make_trainer(task, peer, model, examples, tmp, device, quick), s.warmup, device)


def isolated(peer: str):
    """Around a peer that patches Transformers for the process (`liger`, `turbotrain + liger`): its patches undone
    afterwards."""
    from scripts.gpu_check_isolation import transformers_patches_undone

    return transformers_patches_undone() if "liger" in peer else contextlib.nullcontext()


def measure(build, warmup: int, device: torch.device) -> dict:
    """Train the trainer `build(output_dir)` makes (its collator counts tokens and FLOPs: `Counting`); tokens/s
    and FLOP/s of the steps after `warmup`, peak memory (less what was held before the trainer: the caller's
    own copy of the model), per-step losses."""
    resident = 0
    if device.type == "cuda":
        gc.collect()  # the previous peer's trainer and model, so the peak is this peer's own
        torch.cuda.empty_cache()
        resident = torch.cuda.memory_allocated(device)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = build(tmp)
        times = StepTimes()
        trainer.add_callback(times)
        trainer.remove_callback(PrinterCallback)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        trainer.train()
        peak_gb = (torch.cuda.max_memory_allocated(device) - resident) / 2**30 if device.type == "cuda" else None
    counting = trainer.data_collator
    timed = times.seconds[warmup:]
    tokens = counting.tokens[warmup : warmup + len(timed)]
    flops = counting.flops[warmup : warmup + len(timed)]
    seconds = sum(timed)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return {
        "tokens_s": sum(tokens) / seconds if seconds else 0.0,
        "flops_s": sum(flops) / seconds if seconds else 0.0,
        "median_step_s": statistics.median(timed) if timed else 0.0,
        "peak_gb": peak_gb,
        "losses": losses,
        "summary": getattr(trainer, "turbo_summary", lambda: "")(),
    }


def loss_difference(losses: list[float], stock: list[float]) -> float | None:
    pairs = [(a, b) for a, b in zip(losses, stock) if math.isfinite(b)]
    if not pairs or len(losses) != len(stock):
        return None
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in pairs)
