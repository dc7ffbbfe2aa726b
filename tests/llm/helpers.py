"""Shared set-up for the LLM fine-tuning tests: a word-level tokenizer, a tiny Qwen2-shaped decoder and
chat-style prompt/completion rows (built locally, nothing downloaded)."""

from __future__ import annotations

import torch
from datasets import Dataset

from tests.tiny_models import decoder_config

WORDS = [f"w{i}" for i in range(90)]
SPECIAL = {"<pad>": 0, "<eos>": 1, "<unk>": 2}


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {**SPECIAL, **{word: i + len(SPECIAL) for i, word in enumerate(WORDS)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def decoder(seed: int = 0, tied: bool = True, vocab: int = len(WORDS) + len(SPECIAL)):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = decoder_config(
        Qwen2Config, vocab_size=vocab, tie_word_embeddings=tied, eos_token_id=1, attention_dropout=0.0
    )
    return Qwen2ForCausalLM(config)


def prompt_completion_rows(n: int = 48, seed: int = 0) -> Dataset:
    """`prompt` / `completion` strings of uneven lengths (2-11 and 1-14 words)."""
    generator = torch.Generator().manual_seed(seed)

    def text(low, high):
        length = int(torch.randint(low, high, (1,), generator=generator))
        return " ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (length,), generator=generator))

    return Dataset.from_list([{"prompt": text(2, 12), "completion": text(1, 15)} for _ in range(n)])


def lora_config(modules_to_save=None):
    from peft import LoraConfig

    return LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "v_proj", "gate_proj", "down_proj"],
        modules_to_save=modules_to_save,
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )


def record_op_calls(monkeypatch, note) -> list:
    """Every run of the per-row chunked log-prob op (passes/chunked_ce/logprobs.py), as `note(args)` makes it from the
    op's positional arguments (hidden, weight, bias, targets, softcap, chunk_rows, want_stats, 1 / temperature)."""
    from turbotrain.passes.chunked_ce import logprobs

    calls = []
    original = logprobs.LinearLogProbs.apply

    def noted(*args):
        calls.append(note(args))
        return original(*args)

    monkeypatch.setattr(logprobs.LinearLogProbs, "apply", noted)
    return calls


# GRPO and RLOO: sampled completions scored at a temperature != 1, a reference model (beta > 0). sgd: the
# parameters after the steps differ from stock's by lr x the gradients' float error, which Adam would magnify
# for parameters whose gradient is ~0 (its update is g / sqrt(v), whatever the size of g)
SAMPLING_TEMPERATURE = 0.7
SAMPLING_CONFIG = dict(
    num_generations=4,
    max_completion_length=8,
    generation_batch_size=8,
    temperature=SAMPLING_TEMPERATURE,
    beta=0.1,
    optim="sgd",
    learning_rate=0.5,
    bf16=False,
)


def reward_length(completions, **kwargs):
    return [float(len(completion.split())) for completion in completions]


def saved_decoder(tmp_path):
    """The policy, saved where GRPOTrainer and RLOOTrainer build their reference model from (its name_or_path)."""
    model = decoder()
    path = tmp_path / "initial"
    model.save_pretrained(path)
    model.config.name_or_path = str(path)
    return model


def sampling_run(tmp_path, trainer_class, config_class, steps: int = 3, peft_config=None, **config):
    """(trainer, logged entries) of a GRPO-like `trainer_class` trained `steps` steps on prompts only, rewarded by
    their completions' length (LoRA with `peft_config`)."""
    from tests.trainer_helpers import COMMON

    settings = {**COMMON, **SAMPLING_CONFIG, "max_steps": steps, **config}
    side = "turbo" if getattr(trainer_class, "turbo_report", False) is not False else "stock"
    args = config_class(output_dir=str(tmp_path / side), use_cpu=True, **settings)
    trainer = trainer_class(
        model=saved_decoder(tmp_path),
        reward_funcs=reward_length,
        args=args,
        train_dataset=prompt_completion_rows(16).remove_columns("completion"),
        processing_class=tokenizer(),
        peft_config=peft_config,
    )
    trainer.train()
    return trainer, [entry for entry in trainer.state.log_history if "loss" in entry]


def record_packed_calls(monkeypatch) -> list:
    """(real tokens, padded positions) of each scored call padding-free packed inside the model (None: stayed
    padded); passes/padding_free/scored_calls.py."""
    from turbotrain.passes.padding_free import scored_calls

    calls = []
    original = scored_calls.PackedScoredCalls.pack

    def recorded(self, args, kwargs, rows):
        packed = original(self, args, kwargs, rows)
        calls.append(None if packed is None else (packed[2], int(kwargs["attention_mask"].numel())))
        return packed

    monkeypatch.setattr(scored_calls.PackedScoredCalls, "pack", recorded)
    return calls


def record_sampling_op_calls(monkeypatch) -> list:
    """(hidden needs a gradient, statistics wanted, 1 / temperature) of each run of the per-row op."""
    return record_op_calls(monkeypatch, lambda args: (args[0].requires_grad, args[6], args[7]))


def assert_every_sampling_call_answered(trainer, op_calls: list) -> None:
    """A 3-step `sampling_run` of GRPO or RLOO with a separate reference model: each step the policy's call
    (gradient, statistics); each generation (steps 1 and 3: 8 completions scored in batches of 4) two calls of
    the reference (log-probs only) and two of the policy without gradient (the old log-probs); all with the
    sampling temperature, and the summary lists the passes that answered them."""
    from collections import Counter

    assert trainer.turbo_report.chunked_cross_entropy.fused_weighting == "per_row"
    assert trainer.turbo_reference is not None, "the reference model's calls are not answered"
    inv_t = 1 / SAMPLING_TEMPERATURE
    expected = {(True, True, inv_t): 3, (False, False, inv_t): 4, (False, True, inv_t): 4}
    assert Counter(op_calls) == expected, dict(Counter(op_calls))
    active = trainer.turbo_summary().partition("not active")[0]
    assert "label_sparsity" in active and "chunked_cross_entropy" in active
    assert "padding_free (inside scored calls)" in active  # left-padded prompts, then completions: one block a row
