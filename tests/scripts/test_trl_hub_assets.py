"""scripts/trl_hub_assets.py: the offline stand-ins for TRL's test repositories load by their hub names, offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from scripts.trl_hub_assets import LABELS, TEST_ROWS, ZEN, build, commit_hash, environment, zen_configs

LOAD = """
import json
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

repo = "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5"
tokenizer = AutoTokenizer.from_pretrained(repo)
model = AutoModelForCausalLM.from_pretrained(repo)
ids = tokenizer("Clear is kinder than clever.", return_tensors="pt")
chat = tokenizer.apply_chat_template([{"role": "user", "content": "Why?"}], tokenize=False, add_generation_prompt=True)
train = load_dataset("trl-internal-testing/zen", "standard_preference", split="train")
test = load_dataset("trl-internal-testing/zen", "standard_preference", split="test")
wiki = load_dataset("Salesforce/wikitext", "wikitext-2-raw-v1", split="train[:200]")  # as Transformers' GA tests
print(json.dumps({
    "logits": list(model(**ids).logits.shape), "tokens": ids["input_ids"].shape[1], "vocab": len(tokenizer),
    "vocab_size": model.config.vocab_size, "dtype": str(model.dtype), "hidden": model.config.hidden_size,
    "eos": tokenizer.eos_token, "pad": tokenizer.pad_token, "chat": chat,
    "columns": train.column_names, "rows": [len(train), len(test)], "first": train[0],
    "wiki": [wiki.column_names, len(wiki), sum(1 for line in wiki["text"] if line.strip())],
}))
"""


@pytest.mark.requires_llm  # the chat template is the installed TRL's copy of Qwen2.5's
def test_a_model_a_tokenizer_and_a_dataset_load_offline_by_their_hub_names(tmp_path):
    assert build(tmp_path, models=["tiny-Qwen2ForCausalLM-2.5"], configs=["standard_preference"]) == []
    repo = tmp_path / "hub" / "models--trl-internal-testing--tiny-Qwen2ForCausalLM-2.5"
    assert (repo / "refs" / "main").read_text() == commit_hash("trl-internal-testing/tiny-Qwen2ForCausalLM-2.5")
    assert (
        repo / "snapshots" / commit_hash("trl-internal-testing/tiny-Qwen2ForCausalLM-2.5") / "config.json"
    ).is_file()

    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(environment(tmp_path))
    done = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])

    assert found["vocab_size"] >= found["vocab"] > 256  # bytes, merges and the special tokens
    assert found["logits"] == [1, found["tokens"], found["vocab_size"]] and found["hidden"] == 8
    assert found["dtype"] == "torch.bfloat16"
    assert (found["eos"], found["pad"]) == ("<|im_end|>", "<|endoftext|>")
    assert found["chat"].endswith("<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n")
    assert found["columns"] == ["prompt", "chosen", "rejected"]
    assert found["rows"] == [len(ZEN) - TEST_ROWS, TEST_ROWS]
    assert found["first"] == {"prompt": ZEN[0][0], "chosen": ZEN[0][1], "rejected": ZEN[0][2]}
    assert found["wiki"] == [["text"], 200, 200 * 4 // 6]  # wikitext's raw form: a third of the lines empty


def test_every_config_has_its_dataset_types_columns():
    configs = zen_configs()
    columns = {name: sorted(values) for name, values in configs.items()}
    assert columns["standard_language_modeling"] == ["text"]
    assert columns["conversational_language_modeling"] == ["messages"]
    assert (
        columns["standard_prompt_completion"] == columns["conversational_prompt_completion"] == ["completion", "prompt"]
    )
    assert columns["standard_implicit_prompt_preference"] == ["chosen", "rejected"]
    assert columns["conversational_unpaired_preference"] == ["completion", "label", "prompt"]
    assert columns["standard_stepwise_supervision"] == ["completions", "labels", "prompt"]
    for name, values in configs.items():
        assert {len(column) for column in values.values()} == {len(ZEN)}, name
    assert configs["standard_unpaired_preference"]["label"] == list(LABELS)
    steps = configs["standard_stepwise_supervision"]
    assert all(len(c) == len(label) for c, label in zip(steps["completions"], steps["labels"]))
    assert configs["conversational_preference"]["chosen"][0] == [{"role": "assistant", "content": ZEN[0][4]}]
