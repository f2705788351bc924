"""Reference formats of the math reasoning suite's datasets, as ``(gold, pred, expected)`` tables.

ASDiv writes its answers with a label in parentheses (``9 (apples)``), OlympiadBench gives a list of
answers, AMC and SVAMP floats (``27.0``), College Math ``$...$``-wrapped LaTeX: the verifier reads each
as the dataset means it (docs/evaluation.md, "Benchmark formats").
"""

from __future__ import annotations

from typing import Any

import pytest

from rewards.math import GOLD, MathVerifier, extract_answer
from rewards.math.verifier import list_reference


@pytest.mark.parametrize(("gold", "expected"), [
    ("9 (apples)", "9"),
    ("2.5 (square feet)", "2.5"),
    ("36 (sq. inches)", "36"),
    ("15 (grade-A eggs)", "15"),
    ("1,200 (dollars)", "1,200"),
    # not a number with a label: kept whole
    ("(1, 2)", "(1, 2)"),
    ("f(x)", "f(x)"),
    ("Mary's house", "Mary's house"),
    ("2:5", "2:5"),
    ("3 (2)", "3 (2)"),
])
def test_gold_drops_a_unit_label_after_a_number(gold: str, expected: str) -> None:
    assert extract_answer(gold, GOLD) == expected


@pytest.mark.parametrize(("gold", "pred", "expected"), [
    ("9 (apples)", "9", True),
    ("9 (apples)", "9 apples", True),
    ("9 (apples)", "9 (apples)", True),
    ("9", "9 (apples)", True),
    ("9 (apples)", "10", False),
    ("2.5 (square feet)", "\\frac{5}{2}", True),
    (27.0, "27", True),
    (27.0, "27.5", False),
    (145.0, "145", True),
    ("$10-4 n$", "10-4n", True),
    ("$10-4 n$", "10+4n", False),
    (["$2$"], "2", True),
    (["$2$", "$-3$"], "2, -3", True),
    (["$2$", "$-3$"], "-3, 2", True),  # several answers: order does not matter
    (["$2$", "$-3$"], "2", False),
    (["$\\frac{1}{2 n+2}$"], "\\frac{1}{2n+2}", True),
])
def test_benchmark_references(gold: Any, pred: str, expected: bool) -> None:
    result = MathVerifier()(f"So the answer is $\\boxed{{{pred}}}$.", gold)
    assert result.status == "ok"
    assert (result.score == 1.0) is expected, result.info


def test_list_reference_joins_each_answer_without_delimiters() -> None:
    assert list_reference(["$2$", "$-3$"]) == "2, -3"
    assert list_reference(["\\boxed{x+1}"]) == "x+1"
