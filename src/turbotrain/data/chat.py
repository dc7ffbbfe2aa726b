"""Chat-style supervised fine-tuning rows from the standard library's own functions (nothing downloaded).

Each documented function or method whose docstring has at least two lines becomes one row:
prompt = `def name(arguments):` and the docstring's first line (what a user would ask for), completion =
the rest of the docstring (what the model should answer). Parsed with `ast`, never imported; the rows
are sorted by file and line, so every machine with the same Python gets the same rows (~3,800 on
CPython 3.11; cached under `~/.cache/turbotrain` like the corpus).

`build_sft_data` tokenizes prompt and completion apart and concatenates them (plus `</s>`), truncated at
`max_len`, and gives both forms the peers need, with the very same token ids:
* `train`: input_ids and labels, the prompt labelled -100 (completion-only loss), for `Trainer`;
* `trl_train`: input_ids and completion_mask, which TRL's `SFTTrainer` turns into the same labels
  itself (`completion_only_loss`), skipping its own tokenization since the rows are already tokenized;
* `collator`: dynamic padding to the longest row of the batch (labels padded with -100).
"""

from __future__ import annotations

import ast
import json
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch
from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from turbotrain.data.corpus import stdlib_source_files
from turbotrain.modeling import IGNORE_INDEX
from turbotrain.utils.cache import cache_dir, digest, write_atomically


def _rows_of(path: Path) -> list[tuple[str, str]]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
        return []
    rows = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node)
        lines = doc.strip().splitlines() if doc else []
        rest = "\n".join(lines[1:]).strip()
        if len(lines) < 2 or not rest:
            continue
        prompt = f'def {node.name}({ast.unparse(node.args)}):\n    """{lines[0].strip()}\n'
        rows.append((prompt, rest))
    return rows


def _parse_rows(max_rows: int | None) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for path in stdlib_source_files():
        rows.extend(_rows_of(path))
        if max_rows is not None and len(rows) >= max_rows:
            return rows[:max_rows]
    return rows


def function_rows(max_rows: int | None = None) -> list[tuple[str, str]]:
    """(prompt, completion) pairs, in file and line order; the first `max_rows` of them.

    Parsing the whole standard library takes ~15 s on 2 cores, so the result is cached per interpreter."""
    cached = (
        cache_dir() / f"stdlib-functions-{digest(sys.version, sysconfig.get_paths()['stdlib'], str(max_rows))}.json"
    )
    if cached.exists():
        return [tuple(row) for row in json.loads(cached.read_text(encoding="utf-8"))]
    rows = _parse_rows(max_rows)
    write_atomically(cached, json.dumps(rows))
    return rows


@dataclass
class SftData:
    train: Dataset
    trl_train: Dataset
    collator: object
    num_tokens: int
    tokenizer: PreTrainedTokenizerBase


class CompletionCollator:
    """Right-pads input_ids (pad id), attention_mask (0) and labels (-100) to the longest row of the batch."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, features):
        longest = max(len(f["input_ids"]) for f in features)
        batch = {
            "input_ids": torch.full((len(features), longest), self.pad_token_id, dtype=torch.long),
            "attention_mask": torch.zeros((len(features), longest), dtype=torch.long),
            "labels": torch.full((len(features), longest), IGNORE_INDEX, dtype=torch.long),
        }
        for i, f in enumerate(features):
            n = len(f["input_ids"])
            batch["input_ids"][i, :n] = torch.tensor(f["input_ids"])
            batch["attention_mask"][i, :n] = 1
            batch["labels"][i, :n] = torch.tensor(f["labels"])
        return batch


def build_sft_data(tokenizer: PreTrainedTokenizerBase, max_len: int, max_rows: int = 4000, seed: int = 0) -> SftData:
    rows = function_rows(max_rows)
    prompts = tokenizer([p for p, _ in rows], add_special_tokens=False)["input_ids"]
    answers = tokenizer([c for _, c in rows], add_special_tokens=False)["input_ids"]
    ids, labels, masks = [], [], []
    for prompt, answer in zip(prompts, answers):
        sequence = (prompt + answer + [tokenizer.eos_token_id])[:max_len]
        mask = ([0] * len(prompt) + [1] * (len(answer) + 1))[:max_len]
        ids.append(sequence)
        masks.append(mask)
        labels.append([t if m else IGNORE_INDEX for t, m in zip(sequence, mask)])
    order = torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed)).tolist()
    pick = lambda column: [column[i] for i in order]  # noqa: E731 - same shuffle for both forms
    train = Dataset.from_dict({"input_ids": pick(ids), "labels": pick(labels)})
    trl_train = Dataset.from_dict({"input_ids": pick(ids), "completion_mask": pick(masks)})
    return SftData(
        train=train,
        trl_train=trl_train,
        collator=CompletionCollator(tokenizer.pad_token_id),
        num_tokens=sum(len(i) for i in ids),
        tokenizer=tokenizer,
    )
