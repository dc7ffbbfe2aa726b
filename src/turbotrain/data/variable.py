"""Variable-length data: each corpus paragraph is one example at its natural length.

Paragraphs are tokenized as `<s> ... </s>` and truncated at `max_len`. For masked LM the stock
`DataCollatorForLanguageModeling` pads each batch to its longest paragraph and masks 15%; for sequence
classification `DataCollatorWithPadding` pads and the label is whether the paragraph mentions
"return" (a real property of the text, ~35% positive). `length_histogram` summarises the lengths.
"""

from __future__ import annotations

from collections import Counter

from datasets import Dataset
from transformers import DataCollatorForLanguageModeling, DataCollatorWithPadding, PreTrainedTokenizerBase

from turbotrain.data.corpus import Corpus
from turbotrain.data.mlm import MaskedLMData

HISTOGRAM_EDGES = (8, 16, 32, 64, 128, 256, 512)


def length_histogram(lengths: list[int]) -> dict[str, int]:
    """Counts per length bucket, e.g. {"<=8": 120, "9-16": 3000, ...}."""
    counts: Counter = Counter()
    for length in lengths:
        low = 1
        for edge in HISTOGRAM_EDGES:
            if length <= edge:
                counts["<=8" if edge == 8 else f"{low}-{edge}"] += 1
                break
            low = edge + 1
        else:
            counts[f">{HISTOGRAM_EDGES[-1]}"] += 1
    order = (
        ["<=8"] + [f"{a + 1}-{b}" for a, b in zip(HISTOGRAM_EDGES, HISTOGRAM_EDGES[1:])] + [f">{HISTOGRAM_EDGES[-1]}"]
    )
    return {key: counts[key] for key in order if counts[key]}


def build_variable_length_data(
    corpus: Corpus, tokenizer: PreTrainedTokenizerBase, max_len: int, task: str, seed: int = 0
) -> MaskedLMData:
    encodings = tokenizer(
        corpus.paragraphs, truncation=True, max_length=max_len, return_attention_mask=False, return_token_type_ids=False
    )
    columns = {"input_ids": encodings["input_ids"]}
    if task == "cls":
        columns["labels"] = [int("return" in p.lower()) for p in corpus.paragraphs]
        collator = DataCollatorWithPadding(tokenizer)
    else:
        collator = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=0.15)
    dataset = Dataset.from_dict(columns).shuffle(seed=seed)
    num_tokens = sum(len(ids) for ids in columns["input_ids"])
    return MaskedLMData(train=dataset, eval=None, collator=collator, num_tokens=num_tokens)
