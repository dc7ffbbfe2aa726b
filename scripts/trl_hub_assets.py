"""Offline stand-ins for the hub repositories TRL's own trainer tests load (and the two Transformers' Trainer tests
load: TRL's tiny Qwen2 and `Salesforce/wikitext`), built on this machine: no download.

    python scripts/trl_hub_assets.py DIR [--models REPO ...] [--configs NAME ...]

DIR is laid out as an `HF_HOME`: `DIR/hub` is a Hugging Face hub cache (huggingface_hub's layout:
`models--trl-internal-testing--tiny-Qwen2ForCausalLM-2.5/refs/main` holds a commit hash,
`snapshots/<hash>/config.json, model.safetensors, tokenizer.json, tokenizer_config.json, chat_template.jinja,
generation_config.json`), and `DIR/datasets` the `datasets` cache. With `environment(DIR)` set
(`HF_HUB_OFFLINE=1 HF_HUB_CACHE=DIR/hub HF_DATASETS_CACHE=DIR/datasets`), `AutoModelForCausalLM.from_pretrained(
"trl-internal-testing/tiny-Qwen2ForCausalLM-2.5")`, `AutoTokenizer.from_pretrained(...)` and
`datasets.load_dataset("trl-internal-testing/zen", "standard_preference", split="train")` work offline.

* Models (MODELS): one per repository TRL's text tests name, of the repository's class with TRL's tiny sizes
  (hidden 8, or 16 for reward models; 2 layers, 4 heads, 2 kv heads, FFN 32), random weights (seeded; TRL's tiny
  models' init: xavier linears, N(0, 0.02) embeddings), stored in the real tiny model's dtype.
* Tokenizers: one byte-level BPE trained here with `tokenizers` on the zen text and some made-up lines (~600
  tokens), plus each family's special tokens (FAMILIES: Qwen's `<|im_start|>`/`<|im_end|>`/`<|endoftext|>`,
  Llama 3's `<|begin_of_text|>`/`<|eot_id|>`/`<|finetune_right_pad_id|>`, ...); config.vocab_size is
  len(tokenizer). Qwen's tokenizers have the real ones' size and added-token ids (151,665 with Qwen2.5, `<|im_end|>`
  151645; the vocabulary filled with tokens no text encodes to): TRL's GRPO/RLOO tests write those ids into
  mocked generations. The chat template is the family's original one as the installed TRL ships it
  (`trl/chat_templates/<name>.jinja`, Apache-2.0), so TRL recognises it exactly as it does the real model's
  (its training templates for assistant-only loss, response schemas), else CHATML (written here); GPT-NeoX has
  none, as the real tiny one.
* The dataset `trl-internal-testing/zen`: every config TRL's trainer tests load (`zen_configs()`), 17 train and 2 test
  rows of made-up aphorisms (ZEN) with the columns TRL's dataset types define. Written as parquet into the hub
  cache (`datasets--trl-internal-testing--zen/snapshots/<hash>/<config>/*.parquet` and a README with `configs:`)
  and prepared into the `datasets` cache: offline, `load_dataset` never reads the hub cache (it raises before
  asking huggingface_hub) and falls back to that cache's prepared copy.

Not built (their tests fail stock and turbotrain alike): vision-language models and the `zen-image` datasets,
remote-code models, the `toolcall`/`harmony`/`dolly-chatml-sft` datasets; tests whose mocked generations must decode
to real Qwen text (tool calls) or that check the real zen rows fail as well. Deterministic: the same DIR contents every time (a fixed commit hash per repository).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

ORG = "trl-internal-testing"
SEED = 0
DATASET = f"{ORG}/zen"
WIKITEXT, WIKITEXT_CONFIG = "Salesforce/wikitext", "wikitext-2-raw-v1"  # Transformers' Trainer tests load it

# (prompt, completion, rejected completion, question, answer, rejected answer): made-up aphorisms in the Zen
# of Python's style; `prompt + completion` is the sentence.
ZEN = (
    ("Clear is kinder", " than clever.", " than a riddle.", "What is kinder than clever?", "Clear.", "Cryptic."),
    ("Small steps beat", " giant leaps.", " nothing at all.", "What do small steps beat?", "Giant leaps.", "Naps."),
    ("Tests are better", " than hopes.", " left for later.", "What are tests better than?", "Hopes.", "Code."),
    ("A name should say", " what it holds.", " very little.", "What should a name say?", "What it holds.", "No."),
    (
        "Short functions are",
        " easier to read.",
        " harder to find.",
        "Which functions read easily?",
        "Short ones.",
        "The longest ones.",
    ),
    (
        "Fast is fine,",
        " but correct comes first.",
        " and correct is optional.",
        "What comes before fast?",
        "Correct.",
        "Faster.",
    ),
    (
        "Comments explain why,",
        " code explains how.",
        " code explains nothing.",
        "What do comments explain?",
        "Why.",
        "Everything twice.",
    ),
    (
        "Old code deserves",
        " respect and tests.",
        " to be deleted blindly.",
        "What does old code deserve?",
        "Respect and tests.",
        "A rewrite.",
    ),
    ("Every warning", " is a question.", " can be ignored.", "What is every warning?", "A question.", "Noise."),
    ("Measure before", " you optimize.", " lunch.", "What comes before optimizing?", "Measuring.", "Guessing."),
    ("Defaults should", " be safe.", " surprise people.", "What should defaults be?", "Safe.", "Surprising."),
    (
        "Global state is",
        " a shared secret.",
        " always harmless.",
        "What is global state?",
        "A shared secret.",
        "Free memory.",
    ),
    (
        "When in doubt,",
        " leave it out.",
        " add three options.",
        "What to do when in doubt?",
        "Leave it out.",
        "Add more.",
    ),
    ("A failing test", " is a gift.", " should be skipped.", "What is a failing test?", "A gift.", "A nuisance."),
    (
        "Write it down",
        " before you forget it.",
        " after the release.",
        "When should you write it down?",
        "Before you forget it.",
        "Never.",
    ),
    (
        "Loud errors are better",
        " than quiet wrong answers.",
        " than no errors.",
        "What are loud errors better than?",
        "Quiet wrong answers.",
        "Silence.",
    ),
    ("Delete code", " with a smile.", " with regret.", "How should you delete code?", "With a smile.", "Never."),
    (
        "Simple tools make",
        " strong habits.",
        " weak programs.",
        "What do simple tools make?",
        "Strong habits.",
        "Nothing useful.",
    ),
    ("Good logs", " tell a story.", " fill the disk.", "What do good logs tell?", "A story.", "Lies."),
)
LABELS = (
    True,
    False,
    False,
    True,
    True,
    False,
    True,
    False,
    True,
    True,
    False,
    True,
    True,
    False,
    True,
    False,
    True,
    False,
    False,
)
TEST_ROWS = 2  # train_test_split(test_size=0.1, shuffle=False) of 19 rows, as TRL's zen


def _user(text):
    return [{"role": "user", "content": text}]


def _assistant(text):
    return [{"role": "assistant", "content": text}]


def zen_configs() -> dict[str, dict[str, list]]:
    """Config name -> columns (all 19 rows) of the zen dataset, as TRL's dataset types define them."""
    prompt, completion, rejected, question, answer, wrong = (list(column) for column in zip(*ZEN))
    sentence = [p + c for p, c in zip(prompt, completion)]
    unpaired = [c if label else r for c, r, label in zip(completion, rejected, LABELS)]
    unpaired_answer = [a if label else w for a, w, label in zip(answer, wrong, LABELS)]
    halves = [c.split(" ", 2) for c in completion]  # " than clever." -> ['', 'than', 'clever.']
    steps = [[" " + h[1], " " + h[2]] if len(h) == 3 else [c] for h, c in zip(halves, completion)]
    return {
        "standard_language_modeling": {"text": sentence},
        "standard_prompt_only": {"prompt": prompt},
        "standard_prompt_completion": {"prompt": prompt, "completion": completion},
        "standard_preference": {"prompt": prompt, "chosen": completion, "rejected": rejected},
        "standard_implicit_prompt_preference": {
            "chosen": sentence,
            "rejected": [p + r for p, r in zip(prompt, rejected)],
        },
        "standard_unpaired_preference": {"prompt": prompt, "completion": unpaired, "label": list(LABELS)},
        "standard_stepwise_supervision": {
            "prompt": prompt,
            "completions": steps,
            "labels": [[label] * len(s) if len(s) == 1 else [label, not label] for s, label in zip(steps, LABELS)],
        },
        "conversational_language_modeling": {"messages": [_user(q) + _assistant(a) for q, a in zip(question, answer)]},
        "conversational_prompt_only": {"prompt": [_user(q) for q in question]},
        "conversational_prompt_completion": {
            "prompt": [_user(q) for q in question],
            "completion": [_assistant(a) for a in answer],
        },
        "conversational_preference": {
            "prompt": [_user(q) for q in question],
            "chosen": [_assistant(a) for a in answer],
            "rejected": [_assistant(w) for w in wrong],
        },
        "conversational_implicit_prompt_preference": {
            "chosen": [_user(q) + _assistant(a) for q, a in zip(question, answer)],
            "rejected": [_user(q) + _assistant(w) for q, w in zip(question, wrong)],
        },
        "conversational_unpaired_preference": {
            "prompt": [_user(q) for q in question],
            "completion": [_assistant(a) for a in unpaired_answer],
            "label": list(LABELS),
        },
    }


# A ChatML template (for families whose original template TRL does not ship): system messages, tool turns,
# `add_generation_prompt`.
CHATML = (
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' and default_system is defined -%}"
    "{{ '<|im_start|>system\\n' + default_system + '<|im_end|>\\n' }}{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- elif message['content'] -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)
# Mistral v0.1/v0.2's [INST] form, written here: user and assistant turns alternate, a system message is put
# before the first user message.
MISTRAL = (
    "{{ bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set system = messages[0]['content'] + '\\n\\n' -%}{%- set messages = messages[1:] -%}"
    "{%- else -%}{%- set system = '' -%}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{ '[INST] ' + (system if loop.first else '') + message['content'] + ' [/INST]' }}"
    "{%- elif message['role'] == 'assistant' -%}{{ message['content'] + eos_token }}{%- endif -%}"
    "{%- endfor -%}"
)


@dataclass(frozen=True)
class Family:
    """A tokenizer family: its special tokens, which are bos/eos/pad/unk, and its chat template."""

    template: str | None  # the installed TRL's chat_templates/<template>.jinja; "chatml"/"mistral": written here
    eos: str
    bos: str | None = None
    pad: str | None = None
    unk: str | None = None
    add_bos: bool = False
    special: tuple[str, ...] = ()  # special tokens besides those the template names
    # Added tokens at the real tokenizer's ids (special or not), the vocabulary filled with unreachable tokens up
    # to the first: TRL's GRPO/RLOO tests write Qwen's ids (151643 pad, 151645 eos) into mocked generations, and
    # count on a random model almost never drawing eos from a full-size vocabulary.
    ids_from: int = 0
    ordered: tuple[tuple[str, bool], ...] = ()


QWEN2_5_ADDED = (
    *(
        (token, True)
        for token in (
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            "<|object_ref_start|>",
            "<|object_ref_end|>",
            "<|box_start|>",
            "<|box_end|>",
            "<|quad_start|>",
            "<|quad_end|>",
            "<|vision_start|>",
            "<|vision_end|>",
            "<|vision_pad|>",
            "<|image_pad|>",
            "<|video_pad|>",
        )
    ),
    ("<tool_call>", False),
    ("</tool_call>", False),
    *(
        (token, False)
        for token in (
            "<|fim_prefix|>",
            "<|fim_middle|>",
            "<|fim_suffix|>",
            "<|fim_pad|>",
            "<|repo_name|>",
            "<|file_sep|>",
        )
    ),
)  # ids 151643..151664
QWEN3_ADDED = (
    *QWEN2_5_ADDED,
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)  # ..151668
LLAMA3_EXTRA = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|finetune_right_pad_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
)
FAMILIES: dict[str, Family] = {
    "qwen2_5": Family("qwen2_5", eos="<|im_end|>", pad="<|endoftext|>", ids_from=151643, ordered=QWEN2_5_ADDED),
    "qwen3": Family("qwen3", eos="<|im_end|>", pad="<|endoftext|>", ids_from=151643, ordered=QWEN3_ADDED),
    "llama3": Family("llama3", eos="<|eot_id|>", bos="<|begin_of_text|>", add_bos=True, special=LLAMA3_EXTRA),
    "llama3_1": Family("llama3_1", eos="<|eot_id|>", bos="<|begin_of_text|>", add_bos=True, special=LLAMA3_EXTRA),
    "llama3_2": Family("llama3_2", eos="<|eot_id|>", bos="<|begin_of_text|>", add_bos=True, special=LLAMA3_EXTRA),
    "mistral": Family("mistral", eos="</s>", bos="<s>", unk="<unk>", add_bos=True),
    "gemma": Family(
        "gemma",
        eos="<eos>",
        bos="<bos>",
        pad="<pad>",
        unk="<unk>",
        add_bos=True,
        special=("<start_of_turn>", "<end_of_turn>"),
    ),
    "cohere": Family(
        "cohere",
        eos="<|END_OF_TURN_TOKEN|>",
        bos="<BOS_TOKEN>",
        pad="<PAD>",
        unk="<UNK>",
        add_bos=True,
        special=("<EOS_TOKEN>",),
    ),
    "phi3": Family(
        "phi3",
        eos="<|endoftext|>",
        bos="<s>",
        pad="<|endoftext|>",
        unk="<unk>",
        special=("<|endoftext|>", "<|placeholder1|>"),
    ),
    "gptoss": Family(
        "gptoss", eos="<|return|>", bos="<|startoftext|>", pad="<|endoftext|>", special=("<|constrain|>",)
    ),
    "glm4moe": Family("glm4moe", eos="<|endoftext|>", pad="<|endoftext|>", special=("[gMASK]", "<sop>", "<eop>")),
    "deepseekv3": Family(
        "deepseekv3",
        eos="<｜end▁of▁sentence｜>",
        bos="<｜begin▁of▁sentence｜>",
        pad="<｜end▁of▁sentence｜>",
        add_bos=True,
    ),
    "lfm2": Family("lfm2", eos="<|im_end|>", bos="<|startoftext|>", pad="<|pad|>", add_bos=True),
    "lfm2_2_5": Family("lfm2_2_5", eos="<|im_end|>", bos="<|startoftext|>", pad="<|pad|>", add_bos=True),
    "nemotron": Family("nemotron_3_nano", eos="<|im_end|>", bos="<s>", pad="<pad>", unk="<unk>"),
    "olmo3": Family("chatml", eos="<|im_end|>", pad="<|pad|>", special=("<|endoftext|>",)),
    "gpt_neox": Family(None, eos="<|endoftext|>", bos="<|endoftext|>", unk="<|endoftext|>"),
}
FAMILIES["cohere2"] = replace(FAMILIES["cohere"], template="cohere2")  # the same tokens, its own template
TAGS = ("think", "tool_call", "tool_response", "arg_key", "arg_value")  # added (not special) tokens, as Qwen's


@dataclass(frozen=True)
class Model:
    """A tiny model repository: its model type, head and tokenizer family, and its config beyond TINY."""

    model_type: str
    family: str
    head: str = "causal"  # or "classification" (a reward model: num_labels=1, hidden 16)
    dtype: str = "bfloat16"
    config: dict = field(default_factory=dict)


TINY = {
    "hidden_size": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 32,
}
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
MODELS = {
    "tiny-Qwen2ForCausalLM-2.5": Model("qwen2", "qwen2_5"),
    "tiny-Qwen2ForSequenceClassification-2.5": Model("qwen2", "qwen2_5", head="classification"),
    "tiny-Qwen3ForCausalLM": Model("qwen3", "qwen3"),
    "tiny-Qwen3ForSequenceClassification": Model("qwen3", "qwen3", head="classification"),
    "tiny-Qwen3MoeForCausalLM": Model("qwen3_moe", "qwen3", config=MOE),
    "tiny-LlamaForCausalLM-3": Model("llama", "llama3"),
    "tiny-LlamaForCausalLM-3.1": Model("llama", "llama3_1"),
    "tiny-LlamaForCausalLM-3.2": Model("llama", "llama3_2"),
    "tiny-LlamaForSequenceClassification-3.2": Model("llama", "llama3_2", head="classification"),
    "tiny-MistralForCausalLM-0.1": Model("mistral", "mistral"),
    "tiny-MistralForCausalLM-0.2": Model("mistral", "mistral"),
    "tiny-GemmaForCausalLM": Model("gemma", "gemma"),
    "tiny-Gemma2ForCausalLM": Model("gemma2", "gemma"),
    "tiny-CohereForCausalLM": Model("cohere", "cohere", dtype="float16", config={"logit_scale": 0.125}),
    "tiny-Cohere2ForCausalLM": Model("cohere2", "cohere2", config={"logit_scale": 1.0}),
    "tiny-Phi3ForCausalLM": Model("phi3", "phi3"),
    "tiny-GptOssForCausalLM": Model("gpt_oss", "gptoss", config={"num_local_experts": 4, "num_experts_per_tok": 2}),
    "tiny-Glm4MoeForCausalLM": Model(
        "glm4_moe",
        "glm4moe",
        config={
            "moe_intermediate_size": 32,
            "head_dim": 2,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "attention_bias": True,
            "use_qk_norm": True,
            "num_nextn_predict_layers": 1,
        },
    ),
    "tiny-DeepseekV3ForCausalLM": Model("deepseek_v3", "deepseekv3", config={"num_attention_heads": 2}),
    "tiny-DeepseekV3ForCausalLM-0528": Model("deepseek_v3", "deepseekv3", config={"num_attention_heads": 2}),
    "tiny-Lfm2ForCausalLM": Model(
        "lfm2", "lfm2", config={"layer_types": ["conv", "full_attention"], "block_multiple_of": 8, "use_cache": False}
    ),
    "tiny-Lfm2ForCausalLM-2.5": Model(
        "lfm2", "lfm2_2_5", config={"layer_types": ["conv", "full_attention"], "use_cache": False}
    ),
    "tiny-Olmo3ForCausalLM": Model("olmo3", "olmo3", config={"use_cache": False}),
    "tiny-NemotronHForCausalLM-nano": Model(
        "nemotron_h",
        "nemotron",
        config={
            "hidden_size": 16,
            "layers_block_type": ["mamba", "attention", "moe"],
            "mamba_num_heads": 8,
            "mamba_head_dim": 4,
            "mamba_n_groups": 1,
            "ssm_state_size": 16,
            "mamba_d_conv": 4,
            "mamba_expand": 2,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "moe_shared_expert_intermediate_size": 32,
            "use_mamba_kernels": False,
        },
    ),
    "tiny-GPTNeoXForCausalLM": Model("gpt_neox", "gpt_neox", dtype="float16"),
}


def commit_hash(repo_id: str) -> str:
    """A fixed 40-hex commit hash per repository (this builder's, not the hub's)."""
    return hashlib.sha1(f"turbotrain-offline/{repo_id}/1".encode()).hexdigest()


def snapshot(hub: Path, repo_id: str, kind: str = "model") -> Path:
    """The snapshot folder of `repo_id` in the hub cache `hub`, with refs/main pointing at it."""
    repo = hub / f"{kind}s--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit_hash(repo_id))
    folder = repo / "snapshots" / commit_hash(repo_id)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def template_text(family: Family) -> str | None:
    if family.template in (None, "chatml", "mistral"):
        return {"chatml": CHATML, "mistral": MISTRAL}.get(family.template)
    import importlib.util

    spec = importlib.util.find_spec("trl")  # its folder, without importing TRL
    path = Path(spec.origin).parent / "chat_templates" / f"{family.template}.jinja" if spec else None
    return path.read_text(encoding="utf-8") if path and path.exists() else CHATML


SPECIAL_IN_TEMPLATE = re.compile(r"<\|[A-Za-z0-9_]+\|>|<｜[^｜<>]+｜>")


def corpus() -> list[str]:
    """Text to train the tokenizer on: every zen string and some made-up lines (code, numbers, tool calls)."""
    lines = []
    for columns in zen_configs().values():
        for values in columns.values():
            for value in values:
                lines.append(json.dumps(value) if not isinstance(value, str) else value)
    words = "the a is of to and in that it for on with as by at from this be are was or not you your can".split()
    lines += [" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) for i in range(40)]
    lines += [f"{i} + {i + 1} = {2 * i + 1}; {i} * 3 = {3 * i}" for i in range(50)]
    lines += [
        '{"name": "multiply", "arguments": {"a": 3, "b": 4}}',
        "def f(x):\n    return x * 2\n",
        "You are a helpful assistant.",
        "system user assistant tool",
    ]
    return lines


def train_tokenizer():
    """A byte-level BPE trained on `corpus()` (no special tokens: each family adds its own)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, min_frequency=2, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    return tokenizer


def family_tokenizer(base, family: Family):
    """`base` with `family`'s special tokens, bos/eos/pad and chat template, as a Transformers tokenizer."""
    from tokenizers import AddedToken, Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    state = json.loads(base.to_str())
    vocab = state["model"]["vocab"]
    for index in range(len(vocab), family.ids_from):  # never produced: no merge makes them
        vocab[f"\u0120<filler{index}>"] = index
    tokenizer = Tokenizer.from_str(json.dumps(state))
    template = template_text(family)
    named = [family.bos, family.eos, family.pad, family.unk, *family.special]
    named += SPECIAL_IN_TEMPLATE.findall(template or "")
    added = dict(family.ordered)
    added.update((token, True) for token in named if token and token not in added)
    if template and not family.ordered and any(f"<{tag}>" in template for tag in TAGS):
        added.update((token, False) for tag in TAGS for token in (f"<{tag}>", f"</{tag}>") if token not in added)
    for token, special in added.items():  # one at a time: each gets the next id
        (tokenizer.add_special_tokens if special else tokenizer.add_tokens)(
            [AddedToken(token, special=special, normalized=False)]
        )
    if family.add_bos:
        bos = (family.bos, tokenizer.token_to_id(family.bos))
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{family.bos} $A", pair=f"{family.bos} $A {family.bos} $B", special_tokens=[bos]
        )
    roles = (family.bos, family.eos, family.pad, family.unk)
    made = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=family.bos,
        eos_token=family.eos,
        pad_token=family.pad,
        unk_token=family.unk,
        model_max_length=32768,
        add_bos_token=family.add_bos,
        extra_special_tokens=[token for token, special in added.items() if special and token not in roles],
    )
    if template:
        made.chat_template = template
    return made


def init_weights(model) -> None:
    """TRL's tiny models' init: xavier-uniform linears (zero bias), N(0, 0.02) embeddings, unit layer norms."""
    import torch
    from torch import nn

    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Conv1d)):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)


def build_model(hub: Path, name: str, base) -> Path:
    """Writes the repository `trl-internal-testing/<name>` (MODELS) into the hub cache `hub`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification, GenerationConfig

    spec, family = MODELS[name], FAMILIES[MODELS[name].family]
    tokenizer = family_tokenizer(base, family)
    ids = {
        key: tokenizer.convert_tokens_to_ids(token) if token else None
        for key, token in (("bos", family.bos), ("eos", family.eos), ("pad", family.pad))
    }
    kwargs = {
        **TINY,
        "vocab_size": len(tokenizer),
        "bos_token_id": ids["bos"],
        "eos_token_id": ids["eos"],
        "pad_token_id": ids["pad"],
    }
    if spec.head == "classification":
        kwargs.update(hidden_size=16, num_labels=1)
    kwargs.update(spec.config)
    config = AutoConfig.for_model(spec.model_type, **kwargs)
    if isinstance(getattr(config, "layer_types", None), list) and "layer_types" not in spec.config:
        config.layer_types = config.layer_types[: config.num_hidden_layers]
    torch.manual_seed(SEED)
    auto = AutoModelForSequenceClassification if spec.head == "classification" else AutoModelForCausalLM
    model = auto.from_config(config)
    init_weights(model)
    model = model.to(getattr(torch, spec.dtype))
    folder = snapshot(hub, f"{ORG}/{name}")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    eos = [ids["eos"]] + ([ids["pad"]] if family.pad in ("<|endoftext|>",) and ids["pad"] != ids["eos"] else [])
    GenerationConfig(
        bos_token_id=ids["bos"], eos_token_id=eos if len(eos) > 1 else eos[0], pad_token_id=ids["pad"]
    ).save_pretrained(folder)
    (folder / "README.md").write_text(
        f"---\nlibrary_name: transformers\n---\nOffline stand-in for {ORG}/{name}, "
        "built by turbotrain's scripts/trl_hub_assets.py (random weights).\n"
    )
    return folder


def build_dataset(home: Path, configs: list[str]) -> Path:
    """The zen dataset's `configs`: parquet files in the hub cache, each prepared into the `datasets` cache."""
    from datasets import Dataset
    from datasets.packaged_modules.parquet.parquet import Parquet

    columns = zen_configs()
    folder = snapshot(home / "hub", DATASET, kind="dataset")
    card = ["---", "configs:"]
    for name in configs:
        card += [f"- config_name: {name}", "  data_files:"]
        files = {}
        for split, rows in (("train", slice(0, len(ZEN) - TEST_ROWS)), ("test", slice(len(ZEN) - TEST_ROWS, None))):
            path = folder / name / f"{split}-00000-of-00001.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            Dataset.from_dict({key: values[rows] for key, values in columns[name].items()}).to_parquet(path)
            files[split] = [str(path)]
            card += [f"  - split: {split}", f"    path: {name}/{path.name}"]
        prepare_cached(home / "datasets", name, files, Parquet)
    (folder / "README.md").write_text(
        "\n".join(
            [
                *card,
                "---",
                "Offline stand-in for trl-internal-testing/zen "
                "(made-up aphorisms), built by scripts/trl_hub_assets.py.",
                "",
            ]
        )
    )
    return folder


def prepare_cached(cache: Path, name: str, files: dict[str, list[str]], parquet, repo_id: str = DATASET) -> None:
    """Config `name` of `repo_id` prepared into the `datasets` cache where offline `load_dataset(repo_id, name)`
    looks for it: `trl-internal-testing___zen/<name>/0.0.0/<hash>/` (dataset_info.json, zen-train.arrow, ...).
    A builder given a repo_id refuses local data files, so it is prepared under its bare name and moved."""
    owner, dataset = repo_id.split("/")
    target = cache / f"{owner}___{dataset}" / name
    if target.exists():
        shutil.rmtree(target)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        builder = parquet(
            cache_dir=scratch,
            dataset_name=dataset,
            config_name=name,
            config_id=name,
            data_files=files,
            hash=commit_hash(repo_id),
        )
        builder.download_and_prepare()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(Path(scratch) / dataset / name), str(target))


def build_wikitext(home: Path) -> Path:
    """`Salesforce/wikitext`, config `wikitext-2-raw-v1`: what Transformers' gradient-accumulation Trainer tests
    load (`split="train[:200]"`, empty lines filtered, each line tokenized to 16). 240 train lines in wikitext's
    raw form (headings, paragraphs of the zen text, empty lines) and 24 each for validation and test."""
    from datasets import Dataset
    from datasets.packaged_modules.parquet.parquet import Parquet

    folder = snapshot(home / "hub", WIKITEXT, kind="dataset")
    sentences = [f"{row[0]}{row[1]}" for row in ZEN]
    lines = []
    for index in range(288):
        kind = index % 6
        if kind in (0, 2):
            lines.append("")
        elif kind == 1:
            lines.append(f" = {sentences[index % len(sentences)].split()[0]} {index // 6} = \n")
        else:
            lines.append(" " + " ".join(sentences[(index + k) % len(sentences)] for k in range(kind)) + " \n")
    files = {}
    for split, rows in (("train", slice(0, 240)), ("validation", slice(240, 264)), ("test", slice(264, 288))):
        path = folder / WIKITEXT_CONFIG / f"{split}-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        Dataset.from_dict({"text": lines[rows]}).to_parquet(path)
        files[split] = [str(path)]
    prepare_cached(home / "datasets", WIKITEXT_CONFIG, files, Parquet, repo_id=WIKITEXT)
    (folder / "README.md").write_text("Offline stand-in for Salesforce/wikitext (made-up lines), built by "
                                      "scripts/trl_hub_assets.py.\n")  # fmt: skip
    return folder


def environment(home: Path) -> dict[str, str]:
    """The environment variables under which the assets in `home` stand in for the hub, offline."""
    home = Path(home).resolve()
    return {
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_DATASETS_CACHE": str(home / "datasets"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def build(home: Path, models: list[str] | None = None, configs: list[str] | None = None) -> list[str]:
    """Writes the models (default: all of MODELS) and zen configs (default: all) into `home`; returns the names
    of the models that could not be built (this Transformers lacks the family, ...), each said on stderr."""
    from datasets.utils.logging import disable_progress_bar
    from transformers.utils import logging

    disable_progress_bar()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    home = Path(home)
    (home / "hub").mkdir(parents=True, exist_ok=True)
    (home / "datasets").mkdir(parents=True, exist_ok=True)
    build_dataset(home, configs or list(zen_configs()))
    build_wikitext(home)
    base, failed = train_tokenizer(), []
    for name in models if models is not None else MODELS:
        try:
            build_model(home / "hub", name, base)
        except Exception as error:  # noqa: BLE001 - one family this Transformers cannot build: the others still are
            print(f"trl_hub_assets: {name} not built: {type(error).__name__}: {error}", file=sys.stderr)
            failed.append(name)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where to write (an HF_HOME: hub/ and datasets/)")
    parser.add_argument("--models", nargs="*", choices=list(MODELS), help="default: all")
    parser.add_argument("--configs", nargs="*", choices=list(zen_configs()), help="zen configs (default: all)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    failed = build(args.folder, args.models, args.configs)
    print(" ".join(f"{key}={value}" for key, value in environment(args.folder).items()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
