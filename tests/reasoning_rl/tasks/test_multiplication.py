"""The multiplication tasks (with and without the Python tool): right answers, disjoint splits,
the same held-out problems for both, the tool format as the warm start's target."""

from __future__ import annotations

import pytest

from reasoning_rl.settings.task import TaskConfig
from reasoning_rl.tasks import Task
from reasoning_rl.tasks.multiplication import make_multiplication_dataset


def test_rows_are_right_and_the_splits_disjoint():
    train = make_multiplication_dataset(500, seed=0, split="train")
    test = make_multiplication_dataset(200, seed=1, split="test", cycle=False)
    for row in train[:20] + test[:20]:
        assert row["answer"] == str(row["a"] * row["b"]) and 100 <= row["a"] <= 999 and 100 <= row["b"] <= 999
        assert row["question"] == f"What is {row['a']} * {row['b']}?"
    assert not {r["id"] for r in train} & {r["id"] for r in test}
    assert len({r["id"] for r in test}) == 200  # evaluation rows are distinct


def test_a_small_grid_is_returned_once_without_cycling():
    rows = make_multiplication_dataset(1000, seed=0, split="test", low=1, high=3, test_fraction=1.0, cycle=False)
    assert sorted((r["a"], r["b"]) for r in rows) == [(a, b) for a in (1, 2, 3) for b in (1, 2, 3)]
    with pytest.raises(ValueError, match="low <= high"):
        make_multiplication_dataset(1, seed=0, split="train", low=5, high=2)


def test_both_definitions_hold_the_same_held_out_problems():
    tool, plain = Task(TaskConfig(name="multiply_tool")), Task(TaskConfig(name="multiply"))
    held_tool, held_plain = tool.examples("test"), plain.examples("test")
    assert [e.id for e in held_tool] == [e.id for e in held_plain] and len(held_tool) == 200
    ex = tool.examples("train")[0]
    a, b = ex.id.removeprefix("multiply/").split("*")
    assert ex.solution == f"```python\nprint({a} * {b})\n```\n```output\n{ex.reference}\n```\nThe answer is {ex.reference}."
    assert plain.examples("train")[0].solution == plain.examples("train")[0].reference


def test_the_warm_start_teaches_the_tool_episode():
    from reasoning_rl.settings.evaluation import WarmStartConfig
    from reasoning_rl.warmstart import warm_start_targets

    examples = Task(TaskConfig(name="multiply_tool")).examples("train")[:3]
    tool = warm_start_targets(examples, WarmStartConfig(target="solution"))
    assert [t.solution for t in tool] == [e.solution for e in examples] and "```output" in tool[0].solution
    assert [t.solution for t in warm_start_targets(examples, WarmStartConfig())] == [e.reference for e in examples]
    with pytest.raises(ValueError, match="'reference' or 'solution'"):
        warm_start_targets(examples, WarmStartConfig(target="answer"))
