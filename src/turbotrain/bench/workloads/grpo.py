"""`--task grpo`: TRL's `GRPOTrainer`, reference model on, its step's optimisation part timed apart from generation.

Model: `--shape` and its overrides as the dpo workload's (bench/shapes.py; `small` is a Qwen2 layout, hidden
256, 4 layers; `--vocab-size 151936` gives the issue's Qwen2-shaped vocabulary), random weights, tied
embeddings unless `--untied`, full fine-tuning. Each peer's policy is a fresh copy of the initial model, saved
to the segment's scratch folder first: GRPOTrainer builds its reference model from the policy's
`config._name_or_path` (beta > 0), so the reference is the same initial weights, loaded by TRL itself.
Data (data/prompts.py): `--prompts` prompts of `--prompt-tokens` (default 30-200) tokens of corpus text.
Every peer: `--num-generations` (4) completions per prompt sampled by TRL (temperature 1, the Trainer's seed),
at most `--max-completion-length` (96) new tokens; a step trains on `--batch-size` (4) completions, so one
generation per step (`generation_batch_size` = batch size: no old-policy log-probs, one step per generation);
beta 0.04 (the KL to the reference), TRL's default loss (`loss_type` "dapo" in TRL 1.16), fp32 unless `--bf16`,
`gradient_checkpointing=False` (TRL's default is True), the reward `reward_characters` (in code, deterministic:
a completion's decoded length in characters / 100).

Peers, built as a user writes them, same weights, prompts and seed: `stock`: `GRPOTrainer` with `GRPOConfig`;
`turbo`: `turbo(GRPOTrainer)` with `turbo_arguments(GRPOConfig)` (`turbo:<backend>`, `--turbo-off` as every
workload's).

What is timed (GrpoPeer): a step is one optimizer step end to end (StepClock); generation is TRL's
`GRPOTrainer._generate` (trl_boundary.note_grpo_generations: tokenizing the prompts, sampling the completions
with `model.generate`, decoding them), timed around each call and charged to the step it ran in. The step
seconds the runner reports, pairs and calls "x stock" are the **optimisation part**: the step's wall time less
its generation, i.e. the rewards and advantages, the reference model's per-token log-probs (no gradient), the
policy's per-token log-probs, the loss, backward, the optimizer step and logging. Generation is reported apart
(`apart_median_s`, `apart_step_s`), never in the ratio; it is stock in every peer. Tokens/s counts the prompt
and completion tokens each step trained on. Every step's prompts and completions (token ids) are recorded as a
digest, and the loss difference is taken only over steps whose completions equal stock's (`unequal_batches`
counts the others: same seed and weights should give none). Peak memory as every workload's (one process,
each segment's own peak), including generation's. No FLOP count, so no MFU.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from turbotrain.bench.peers import TrainerPeer, TrainerWorkload
from turbotrain.bench.shapes import SHAPES, shape_config
from turbotrain.bench.workload import PeerRecord, register_workload
from turbotrain.bench.workloads.sft import OVERRIDES, causal_lm, corpus_tokenizer
from turbotrain.boundaries.trl_boundary import note_grpo_generations
from turbotrain.data.prompts import build_prompts
from turbotrain.integrations.trl import classes

GRPO_PEERS = ("stock", "turbo")
BETA = 0.04  # the KL coefficient (DeepSeekMath's): > 0, so TRL builds and runs the reference model
SPECIAL_TOKENS = 8  # room in the position table beyond the drawn prompt and the longest completion


def reward_characters(completions, **kwargs) -> list[float]:
    """The workload's reward: each completion's decoded length in characters / 100 (deterministic; completions
    of equal token length differ, as ids beyond the trained tokenizer's vocabulary decode to nothing)."""
    return [len(completion) / 100 for completion in completions]


@dataclass
class GrpoData:
    prompts: Any  # a Dataset of `prompt` strings
    tokenizer: PreTrainedTokenizerBase


@register_workload("grpo")
@dataclass
class Grpo(TrainerWorkload):
    peers: tuple[str, ...] = field(default=GRPO_PEERS, metadata={"help": "stock turbo (turbo:<backend>)"})
    batch_size: int = field(default=4, metadata={"help": "completions per step (a multiple of --num-generations)"})
    num_generations: int = field(default=4, metadata={"help": "completions sampled per prompt"})
    max_completion_length: int = field(default=96, metadata={"help": "new tokens per completion, at most"})
    shape: str = field(default="small", metadata={"help": "a published model's shape", "choices": SHAPES})
    hidden_size: int | None = field(default=None, metadata={"help": "default: the shape's (small: 256)"})
    num_layers: int | None = field(default=None, metadata={"help": "default: the shape's (small: 4)"})
    num_heads: int | None = field(default=None, metadata={"help": "default: the shape's (small: 4)"})
    vocab_size: int | None = field(default=None, metadata={"help": "default: the shape's (small: 50,265)"})
    untied: bool = field(default=False, metadata={"help": "separate input and output embeddings"})
    prompts: int = field(default=64, metadata={"help": "prompts in the dataset"})
    prompt_tokens: tuple[int, ...] = field(default=(30, 200), metadata={"help": "a prompt's fewest and most tokens"})

    apart = "generation"

    def __post_init__(self):
        super().__post_init__()
        self.prompt_tokens = tuple(self.prompt_tokens)
        low, high = self.prompt_tokens
        if not 1 <= low <= high:
            raise ValueError(f"--prompt-tokens takes two lengths, fewest first, got {low} {high}")
        if "compiled" in self.peers:
            raise ValueError("--task grpo has no 'compiled' peer (GRPOTrainer with torch_compile is not measured)")
        if self.num_generations < 2 or self.batch_size % self.num_generations:
            raise ValueError("--batch-size must be a multiple of --num-generations, which must be at least 2")

    def config(self):
        overrides = {name: getattr(self, mine) for mine, name in OVERRIDES.items() if getattr(self, mine)}
        if self.vocab_size:
            overrides["vocab_size"] = self.vocab_size
        longest = self.prompt_tokens[1] + self.max_completion_length + SPECIAL_TOKENS
        return shape_config(self.shape, seq_len=longest, overrides=overrides, untied=self.untied, dropout=0.0)

    def model(self):
        return causal_lm(self.config(), self.seed)

    def data(self) -> GrpoData:
        tokenizer = corpus_tokenizer(self.config().vocab_size)
        prompts = build_prompts(tokenizer, self.prompts, self.prompt_tokens, seed=self.seed)
        return GrpoData(prompts=prompts, tokenizer=tokenizer)

    def trainer(self, peer: str, model, data: GrpoData, counter, output_dir: str) -> TrainerPeer:
        trl_classes = classes("GRPO", f"the grpo workload's '{peer}' peer")
        config_class, trainer_class, options = self.peer_classes(peer, *trl_classes)
        args = config_class(
            **self.common_arguments(output_dir),
            **options,
            beta=BETA,
            num_generations=self.num_generations,
            generation_batch_size=self.batch_size,
            max_completion_length=self.max_completion_length,
            gradient_checkpointing=False,
        )
        trainer = trainer_class(
            model=self.saved_policy(model, Path(output_dir) / "initial"),
            reward_funcs=reward_characters,
            args=args,
            train_dataset=data.prompts,
            processing_class=data.tokenizer,
        )
        return GrpoPeer(trainer, counter)

    def saved_policy(self, model, path: Path):
        """A fresh copy of the initial model, saved to `path`, where GRPOTrainer loads its reference model from."""
        policy = self.fresh(model)
        policy.save_pretrained(path)
        policy.config.name_or_path = str(path)
        return policy

    def title(self) -> str:
        config = self.config()
        shape = f"{self.shape} ({config.model_type})" if self.shape != "small" else "Qwen2-shaped"
        sizes = f"h{config.hidden_size} L{config.num_hidden_layers} vocab {config.vocab_size:,}"
        prompts = "-".join(map(str, self.prompt_tokens))
        lengths = (
            f"prompts {prompts} tokens, {self.num_generations} generations of at most {self.max_completion_length} "
            f"tokens, batch {self.batch_size} completions"
        )
        tied = "untied" if self.untied else "tied"
        timed = "step s = the optimisation part (generation timed apart)"
        return f"GRPO {shape}, full fine-tune, reference model on (beta {BETA}), {tied}, {sizes}, {lengths}" + (
            f"{self.run_suffix()}; {timed}"
        )

    def extras(self, model, data: GrpoData) -> dict:
        ids = data.tokenizer(list(data.prompts["prompt"]), add_special_tokens=False, verbose=False)["input_ids"]
        lengths = sorted(len(row) for row in ids)
        return {"prompt_lengths": {"min": lengths[0], "median": lengths[len(lengths) // 2], "max": lengths[-1]}}


class GrpoPeer(TrainerPeer):
    """A GRPO trainer whose step seconds are the optimisation part: each step's wall time less the generation
    that ran in it (module docstring); the generation seconds, and a digest of each step's prompts and
    completions, come back in the record (`apart_seconds`, `batch_keys`)."""

    def train(self) -> PeerRecord:
        generation, digests = defaultdict(float), {}

        def noted(seconds: float, prompt_ids: list, completion_ids: list):
            step = self.trainer.state.global_step  # the step being trained (0-based)
            generation[step] += seconds
            digests[step] = step_digest(prompt_ids, completion_ids)
            self.counter.note(token_batch(prompt_ids, completion_ids))

        note_grpo_generations(self.trainer, noted)
        record = super().train()
        steps = range(len(record.seconds))
        record.apart_seconds = [generation[step] for step in steps]
        record.seconds = [total - apart for total, apart in zip(record.seconds, record.apart_seconds)]
        record.batch_keys = [digests.get(step, "") for step in steps]
        return record


def step_digest(prompt_ids: list, completion_ids: list) -> str:
    """The token ids of a step's prompts and completions, as one digest."""
    return hashlib.sha256(repr((list(map(list, prompt_ids)), list(map(list, completion_ids)))).encode()).hexdigest()


def token_batch(prompt_ids: list, completion_ids: list) -> dict:
    """`input_ids` and `attention_mask` of prompt + completion rows, for the batch counter (counting.py)."""
    rows = [list(prompt) + list(completion) for prompt, completion in zip(prompt_ids, completion_ids)]
    width = max(len(row) for row in rows)
    ids, mask = torch.zeros(len(rows), width, dtype=torch.long), torch.zeros(len(rows), width, dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, : len(row)], mask[index, : len(row)] = torch.tensor(row), 1
    return {"input_ids": ids, "attention_mask": mask}
