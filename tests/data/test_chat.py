"""data/chat.py: the two row kinds from the standard library, and how a long row is cut."""

from __future__ import annotations

import ast

import pytest

from turbotrain.data.chat import build_sft_data, fitted, function_rows


def test_code_rows_are_a_function_without_its_docstring_then_the_docstring():
    rows = function_rows(30, kind="code")
    assert len(rows) == 30
    for prompt, completion in rows:
        code = prompt.rsplit("\n# What does", 1)[0]
        function = ast.parse(code).body[0]
        assert isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        assert ast.get_docstring(function) is None  # the answer is not in the question
        assert len(completion.splitlines()) >= 2 and completion.splitlines()[0].strip() not in prompt


def test_code_and_chat_rows_are_the_same_functions_asked_differently():
    chat, code = function_rows(10), function_rows(10, kind="code")
    for (chat_prompt, _), (code_prompt, _) in zip(chat, code):
        name = chat_prompt.split("(", 1)[0].removeprefix("def ")
        assert f"def {name}(" in code_prompt


def test_unknown_row_kind_is_refused():
    with pytest.raises(ValueError, match="chat, code"):
        function_rows(5, kind="prose")


@pytest.mark.parametrize(
    ("prompt", "answer", "max_len", "kept_prompt", "kept_answer"),
    [
        (10, 5, 32, 10, 5),  # fits: untouched
        (40, 6, 32, 26, 6),  # a long prompt loses its end, the answer stays whole
        (40, 30, 32, 16, 16),  # both long: the prompt keeps half the row, the answer is cut at the end
        (8, 40, 32, 8, 24),  # a short prompt is never cut
    ],
)
def test_a_long_row_loses_its_prompt_end_first(prompt, answer, max_len, kept_prompt, kept_answer):
    ids, mask = fitted(list(range(prompt)), list(range(100, 100 + answer)), max_len)
    assert len(ids) == len(mask) == kept_prompt + kept_answer
    assert mask == [0] * kept_prompt + [1] * kept_answer
    assert ids[:kept_prompt] == list(range(kept_prompt)) and ids[kept_prompt:] == list(range(100, 100 + kept_answer))


def test_code_rows_label_a_minority_of_tokens_and_keep_every_completion():
    from tests.llm.helpers import tokenizer

    data = build_sft_data(tokenizer(), max_len=96, max_rows=60, kind="code")
    masks = data.trl_train["completion_mask"]
    assert all(1 in mask and mask[0] == 0 and len(mask) <= 96 for mask in masks)
    labelled = sum(map(sum, masks)) / sum(map(len, masks))
    assert 0.1 < labelled < 0.6, labelled
