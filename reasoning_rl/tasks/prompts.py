"""Build the text a model sees: optional few-shot examples, then the question, raw or chat-formatted.

Training (:meth:`reasoning_rl.tasks.Task.examples`, no few-shot) and evaluation
(``reasoning-rl-eval``) format prompts with the same :func:`build_prompt`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reasoning_rl.errors import UserError
from reasoning_rl.tasks.data import load_rows, render
from reasoning_rl.tasks.definition import DatasetDefinition


class PromptError(UserError, ValueError):
    """Prompt settings that cannot be met: few-shot examples a benchmark lacks, a chat template a tokenizer lacks."""


def fewshot_pairs(definition: DatasetDefinition, num_fewshot: int,
                  data_dir: str | Path | None = None) -> list[tuple[str, str]]:
    """The first ``num_fewshot`` (prompt, target) example pairs of the definition's few-shot split."""
    if num_fewshot <= 0:
        return []
    name = definition.name
    if definition.fewshot is None:
        raise PromptError(f"benchmark {name!r} defines no few-shot examples; use num_fewshot=0")
    if definition.fewshot.split is not None:
        rows, _ = load_rows(definition, definition.fewshot.split, data_dir=data_dir)
    else:
        rows = [dict(r) for r in definition.fewshot.examples]
    if len(rows) < num_fewshot:
        raise PromptError(f"benchmark {name!r} has only {len(rows)} few-shot examples, asked for {num_fewshot}")
    return [
        (render(definition.prompt_template, row, f"{name} few-shot row {i}"),
         render(definition.fewshot.target_template, row, f"{name} few-shot row {i}"))
        for i, row in enumerate(rows[:num_fewshot])
    ]


def build_prompt(question: str, shots: list[tuple[str, str]], tokenizer: Any | None = None,
                 chat_template: bool = False, system_prompt: str | None = None) -> str:
    """The model input for one question.

    Raw: ``[system_prompt \\n\\n] shot_prompt shot_target \\n\\n ... question``. Chat: the
    tokenizer's chat template over ``[system], user, assistant, ..., user`` with the
    generation prompt added, so a chat model answers in its own format.
    """
    if not chat_template:
        prefix = "".join(f"{p}{t}\n\n" for p, t in shots)
        system = f"{system_prompt}\n\n" if system_prompt else ""
        return f"{system}{prefix}{question}"
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise PromptError("a chat template was asked for (task.use_chat_template=true in training, "
                         "chat_template=true in evaluation) but the tokenizer has none; turn it off or use an "
                         "instruct model")
    messages: list[dict[str, str]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for p, t in shots:
        messages += [{"role": "user", "content": p}, {"role": "assistant", "content": t}]
    messages.append({"role": "user", "content": question})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
