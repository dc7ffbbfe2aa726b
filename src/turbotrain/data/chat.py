"""Chat-style supervised fine-tuning rows from the standard library's own functions (nothing downloaded).

Each documented function or method whose docstring has at least two lines becomes one row, of one of two kinds:
* `chat`: prompt = `def name(arguments):` and the docstring's first line (what a user would ask for),
  completion = the rest of the docstring (what the model should answer). Short prompts: ~70% of a row's
  tokens are labelled.
* `code`: prompt = the function's code without its docstring and a closing question, completion = the
  whole docstring ("document this function"). Long prompts, labelled -100, as in most chat fine-tuning
  sets: prompt median ~95 tokens (90th percentile ~480), completion median ~50; ~25% of tokens labelled.
Parsed with `ast`, never imported; the rows are in file order (within a file, `ast.walk`'s order), so every
machine with the same Python gets the same rows (~3,800 on CPython 3.11; cached under `~/.cache/turbotrain`
like the corpus).

`build_sft_data` tokenizes prompt and completion apart and concatenates them (plus `</s>`). A row longer
than `max_len` loses the end of its prompt first (down to half of `max_len`), then its own end, so long
prompts keep their completion, as a chat template's truncation would. Both forms the peers need, with the
very same token ids:
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

ROW_KINDS = ("chat", "code")


def _chat_row(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> tuple[str, str]:
    prompt = f'def {node.name}({ast.unparse(node.args)}):\n    """{lines[0].strip()}\n'
    return prompt, "\n".join(lines[1:]).strip()


def _code_row(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> tuple[str, str]:
    body = node.body[1:] or [ast.Pass()]
    bare = type(node)(**{**{name: getattr(node, name) for name in node._fields}, "body": body, "decorator_list": []})
    code = ast.unparse(ast.fix_missing_locations(bare))
    return f"{code}\n# What does {node.name} do?\n", "\n".join(lines)


def _rows_of(path: Path, kind: str = "chat") -> list[tuple[str, str]]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
        return []
    make_row = _code_row if kind == "code" else _chat_row
    rows = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node)
        lines = doc.strip().splitlines() if doc else []
        if len(lines) < 2 or not "\n".join(lines[1:]).strip():
            continue
        rows.append(make_row(node, lines))
    return rows


def _parse_rows(max_rows: int | None, kind: str) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for path in stdlib_source_files():
        rows.extend(_rows_of(path, kind))
        if max_rows is not None and len(rows) >= max_rows:
            return rows[:max_rows]
    return rows


def function_rows(max_rows: int | None = None, kind: str = "chat") -> list[tuple[str, str]]:
    """(prompt, completion) pairs of `kind` (`ROW_KINDS`), in a fixed order (module docstring); the first `max_rows`.

    Parsing the whole standard library takes ~15 s on 2 cores, so the result is cached per interpreter."""
    if kind not in ROW_KINDS:
        raise ValueError(f"row kind must be one of {', '.join(ROW_KINDS)}, not '{kind}'")
    name = "stdlib-functions" if kind == "chat" else f"stdlib-functions-{kind}"
    cached = cache_dir() / f"{name}-{digest(sys.version, sysconfig.get_paths()['stdlib'], str(max_rows))}.json"
    if cached.exists():
        return [tuple(row) for row in json.loads(cached.read_text(encoding="utf-8"))]
    rows = _parse_rows(max_rows, kind)
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


def fitted(prompt: list[int], answer: list[int], max_len: int) -> tuple[list[int], list[int]]:
    """(token ids, completion mask) of prompt + answer in at most `max_len` tokens: the prompt's end is cut
    first, down to half of `max_len` (or its whole length if shorter), then the row's own end."""
    keep = max(max_len - len(answer), min(len(prompt), max_len // 2))
    prompt = prompt[:keep]
    return (prompt + answer)[:max_len], ([0] * len(prompt) + [1] * len(answer))[:max_len]


def build_sft_data(
    tokenizer: PreTrainedTokenizerBase, max_len: int, max_rows: int = 4000, seed: int = 0, kind: str = "chat"
) -> SftData:
    rows = function_rows(max_rows, kind)
    prompts = tokenizer([p for p, _ in rows], add_special_tokens=False, verbose=False)["input_ids"]
    answers = tokenizer([c for _, c in rows], add_special_tokens=False, verbose=False)["input_ids"]
    ids, labels, masks = [], [], []
    for prompt, answer in zip(prompts, answers):
        sequence, mask = fitted(prompt, answer + [tokenizer.eos_token_id], max_len)
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
