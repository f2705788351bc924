"""Build the text a model sees: optional few-shot examples, then the question, raw or chat-formatted."""

from __future__ import annotations

from typing import Any

from benchmarks.data import render
from benchmarks.definitions import BenchmarkSpec


def fewshot_pairs(spec: BenchmarkSpec, num_fewshot: int, data_dir: str | None = None) -> list[tuple[str, str]]:
    """The first ``num_fewshot`` (prompt, target) example pairs of the benchmark's few-shot source."""
    if num_fewshot <= 0:
        return []
    if spec.fewshot is None:
        raise ValueError(f"benchmark {spec.name!r} defines no few-shot examples; use num_fewshot=0")
    if spec.fewshot.source is not None:
        from benchmarks.data import load_rows

        rows, _ = load_rows(spec.fewshot.source, data_dir)
    else:
        rows = [dict(r) for r in spec.fewshot.examples]
    if len(rows) < num_fewshot:
        raise ValueError(f"benchmark {spec.name!r} has only {len(rows)} few-shot examples, asked for {num_fewshot}")
    return [
        (render(spec.prompt_template, row, f"{spec.name} few-shot row {i}"),
         render(spec.fewshot.target_template, row, f"{spec.name} few-shot row {i}"))
        for i, row in enumerate(rows[:num_fewshot])
    ]


def build_prompt(question: str, shots: list[tuple[str, str]], tokenizer: Any | None = None,
                 chat_template: bool = False, system_prompt: str | None = None) -> str:
    """The model input for one question.

    Raw: ``shot_prompt shot_target \\n\\n ... question``. Chat: the tokenizer's chat
    template over ``[system], user, assistant, ..., user`` with the generation
    prompt added, so a chat model answers in its own format.
    """
    if not chat_template:
        prefix = "".join(f"{p}{t}\n\n" for p, t in shots)
        system = f"{system_prompt}\n\n" if system_prompt else ""
        return f"{system}{prefix}{question}"
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat_template=true needs a tokenizer with a chat template; use chat_template=false")
    messages: list[dict[str, str]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for p, t in shots:
        messages += [{"role": "user", "content": p}, {"role": "assistant", "content": t}]
    messages.append({"role": "user", "content": question})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
