"""``code_synthetic`` with test feedback: the same problems, and warm-start episodes that show a retry.

The rows are :func:`reasoning_rl.tasks.code_synthetic.make_code_dataset`'s, plus ``episode``: the
warm start's target (``warmstart.target=solution``) for the ``code_feedback`` environment
(reasoning_rl/envs/code_feedback.py, docs/tools.md). A share ``retry_fraction`` of the rows shows
a wrong first attempt, the observation ``code_feedback`` returns for it (the same text, built by
the same function) and the right answer; the others show the right answer at once::

    x + 4                                        <- a wrong attempt (another constant, or another operation)
    # 1 of 9 tests passed                        <- the environment's feedback for it
    # test 1: f(-7) returned -3, expected 17
        return 10 - x                            <- the prompt's open last line again, and the fix

The wrong attempts' results are computed from the operation's own function (:data:`OPERATIONS`)
on the row's hidden test inputs: nothing runs here. The held-out split is ``code_synthetic``'s.
"""

from __future__ import annotations

import ast
import random
from typing import Any

from reasoning_rl.envs.code_feedback import RETRY_PROMPTS, feedback_lines
from reasoning_rl.envs.failure_report import MAX_REPORTED, TestReport
from reasoning_rl.tasks.code_synthetic import OPERATIONS, make_code_dataset


def hidden_cases(test: str) -> list[tuple[int, int]]:
    """``(input, expected)`` of each ``assert candidate(x) == y`` of a row's ``check``."""
    check = ast.parse(test).body[0]
    cases = []
    for stmt in check.body:  # type: ignore[attr-defined]
        call, expected = stmt.test.left, stmt.test.comparators[0]
        cases.append((ast.literal_eval(call.args[0]), ast.literal_eval(expected)))
    return cases


def wrong_attempt(name: str, c: int, cases: list[tuple[int, int]], rng: random.Random) -> tuple[str, list[int]]:
    """A plausible wrong answer (the same operation with a constant 1 or 2 away, or another operation
    with the same constant) that fails at least one case, and its value on each case."""
    while True:
        if rng.random() < 0.5:
            op_name, k = name, rng.choice([v for v in (c - 2, c - 1, c + 1, c + 2) if v >= 1])
        else:
            op_name, k = rng.choice([n for n in OPERATIONS if n != name]), c
        op = OPERATIONS[op_name]
        got = [op.fn(x, k) for x, _ in cases]
        if any(g != e for g, (_, e) in zip(got, cases)):
            return op.code.format(c=k), got


def retry_episode(row: dict[str, Any], rng: random.Random, max_failures: int = 1, retry_prompt: str = "full") -> str:
    """The warm-start episode of ``row`` with a wrong first attempt, its feedback and the fix."""
    _, name, c = row["id"].split("/")
    cases = hidden_cases(row["test"])
    wrong, got = wrong_attempt(name, int(c), cases, rng)
    failures = tuple(f"test {i}: {row['entry_point']}({x!r}) returned {g!r}, expected {e!r}"
                     for i, ((x, e), g) in enumerate(zip(cases, got), 1) if g != e)[:MAX_REPORTED]
    report = TestReport("failed", sum(g == e for g, (_, e) in zip(got, cases)), len(cases), failures)
    return (f"{wrong}\n" + feedback_lines(report, 5.0, max_failures) + RETRY_PROMPTS[retry_prompt](row["prompt"])
            + row["solution"] + "\n")


def make_feedback_dataset(num_examples: int, seed: int, split: str, retry_fraction: float = 0.5,
                          max_failures: int = 1, retry_prompt: str = "full", **kwargs: Any) -> list[dict]:
    """``code_synthetic``'s rows of ``split`` with ``episode``: a retry episode (:func:`retry_episode`)
    for a seeded share ``retry_fraction`` of them, the right answer and the stop marker for the rest.
    ``max_failures`` and ``retry_prompt`` must match the environment's options; ``kwargs`` go to
    :func:`make_code_dataset` (``max_constant``, ``operations``, ...)."""
    if not 0.0 <= retry_fraction <= 1.0:
        raise ValueError(f"retry_fraction must be in [0, 1], got {retry_fraction}")
    rows = make_code_dataset(num_examples, seed, split, **kwargs)
    rng = random.Random(f"code_synthetic_feedback/{split}/{seed}")
    for row in rows:
        row["episode"] = (retry_episode(row, rng, max_failures, retry_prompt) if rng.random() < retry_fraction
                          else row["solution"] + "\n")
    return rows
