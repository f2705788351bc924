"""Prompt settings that cannot be met are user errors naming the setting to change."""

from __future__ import annotations

import pytest

from reasoning_rl.errors import UserError
from reasoning_rl.tasks.definition import get_definition
from reasoning_rl.tasks.prompts import PromptError, build_prompt, fewshot_pairs


def test_few_shot_examples_a_benchmark_lacks() -> None:
    with pytest.raises(PromptError, match="benchmark 'arithmetic' defines no few-shot examples; use num_fewshot=0"):
        fewshot_pairs(get_definition("arithmetic"), 2)


def test_chat_template_a_tokenizer_lacks() -> None:
    with pytest.raises(PromptError, match="the tokenizer has none") as err:
        build_prompt("1 + 1?", [], tokenizer=None, chat_template=True)
    assert isinstance(err.value, UserError)
