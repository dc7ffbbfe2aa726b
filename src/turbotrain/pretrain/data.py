"""The main job's data: paragraphs at their natural length, a held-out share with fixed masks, baselines.

Every corpus paragraph is one example (`<s> ... </s>`, truncated at `seq_len`); training batches are
padded by the stock `DataCollatorForLanguageModeling` and packed padding-free by TurboTrainer (stock
`Trainer` trains the padded batches). A deterministic share of paragraphs (every paragraph whose
index after a seeded shuffle is below `eval_fraction`) is held out; its masks are drawn once from a
fixed seed, so every evaluation, of every run, scores the same masked tokens.

Baseline: the unigram guess, always the training set's most frequent tokens (special tokens
excluded). Its top-1 / top-5 accuracy on the held-out masked tokens is what a model that has learnt
only token frequencies scores (the "plateau" at loss ~6.8 the old default stopped on).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
from datasets import Dataset
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from turbotrain.data.corpus import Corpus, CorpusError

EVAL_MASK_SEED = 1234


@dataclass
class PretrainData:
    train: Dataset
    eval_batches: list[dict[str, torch.Tensor]]
    held_out_paragraphs: list[str]
    collator: DataCollatorForLanguageModeling
    train_tokens: int
    unigram_top1: float
    unigram_top5: float

    @property
    def eval_masked_tokens(self) -> int:
        return sum(int((b["labels"] != -100).sum()) for b in self.eval_batches)


def fixed_eval_batches(ids: list[list[int]], collator, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """Padded, masked held-out batches drawn from a fixed seed (the training RNG is left untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(EVAL_MASK_SEED)
        return [collator([{"input_ids": x} for x in ids[i : i + batch_size]]) for i in range(0, len(ids), batch_size)]


def unigram_accuracy(train_ids: list[list[int]], batches: list[dict], special_ids: set[int]) -> tuple[float, float]:
    counts = Counter(t for ids in train_ids for t in ids if t not in special_ids)
    top = [t for t, _ in counts.most_common(5)]
    labels = torch.cat([b["labels"][b["labels"] != -100] for b in batches])
    if labels.numel() == 0:
        return 0.0, 0.0
    top1 = float((labels == top[0]).float().mean())
    top5 = float(torch.isin(labels, torch.tensor(top)).float().mean())
    return top1, top5


def build_pretrain_data(
    corpus: Corpus,
    tokenizer: PreTrainedTokenizerBase,
    seq_len: int,
    batch_size: int,
    eval_fraction: float = 0.03,
    seed: int = 0,
) -> PretrainData:
    encoded = tokenizer(
        corpus.paragraphs, truncation=True, max_length=seq_len, return_attention_mask=False, return_token_type_ids=False
    )["input_ids"]
    order = torch.randperm(len(encoded), generator=torch.Generator().manual_seed(seed)).tolist()
    num_eval = max(1, int(len(order) * eval_fraction))
    if len(order) - num_eval < 1:
        raise CorpusError(f"the corpus '{corpus.name}' has {len(order)} paragraph(s); give more text")
    held_out, train_idx = order[:num_eval], order[num_eval:]
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=0.15)
    train_ids = [encoded[i] for i in train_idx]
    eval_batches = fixed_eval_batches([encoded[i] for i in held_out], collator, batch_size)
    top1, top5 = unigram_accuracy(train_ids, eval_batches, set(tokenizer.all_special_ids))
    return PretrainData(
        train=Dataset.from_dict({"input_ids": train_ids}),
        eval_batches=eval_batches,
        held_out_paragraphs=[corpus.paragraphs[i] for i in held_out],
        collator=collator,
        train_tokens=sum(len(x) for x in train_ids),
        unigram_top1=top1,
        unigram_top5=top5,
    )
