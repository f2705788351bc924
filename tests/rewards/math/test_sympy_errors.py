"""A crash inside SymPy is an ``error`` that batch scoring counts, never a silent "not equal".

The pairs below are equal, and SymPy can only show it with ``simplify`` (undefined
functions give no numbers to compare), so making ``simplify`` raise forces a crash in
the middle of a comparison of two parsed expressions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rewards import WorkerPool, score_batch
from rewards.math import MathVerifier, clear_cache, grade
from rewards.math.limits import run_limited
from rewards.math.parse import parse_answer
from rewards.math.symbolic import compare_with_sympy
from tests.rewards.math.sympy_crash import SympyCrash, break_simplify, crash, restore_simplify

NEEDS_SIMPLIFY = [
    pytest.param(r"f(x)(x+1)", r"x f(x) + f(x)", id="expression"),  # simplify(a - b)
    pytest.param(r"f(x) = 2", r"2 f(x) = 4", id="relation"),  # simplify(a / b), the sides' ratio
]


@pytest.fixture
def crashing_sympy_worker() -> Iterator[None]:
    """``sympy.simplify`` raises in the SymPy worker process for the test's duration."""
    clear_cache()  # a cached grade would never reach the worker
    assert run_limited(break_simplify, timeout=120.0).status == "ok"
    yield
    assert run_limited(restore_simplify, timeout=120.0).status == "ok"
    clear_cache()


@pytest.mark.parametrize(("gold", "pred"), NEEDS_SIMPLIFY)
def test_pairs_are_equal_when_sympy_works(gold: str, pred: str) -> None:
    clear_cache()
    result = grade(gold, pred)
    assert result.equal and result.status == "ok" and result.strategy == "sympy"


@pytest.mark.parametrize(("gold", "pred"), NEEDS_SIMPLIFY)
def test_compare_with_sympy_lets_the_crash_propagate(gold: str, pred: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import sympy

    monkeypatch.setattr(sympy, "simplify", crash)
    with pytest.raises(SympyCrash, match="forced by the test"):
        compare_with_sympy(parse_answer(gold), parse_answer(pred), 1e-6, 5)


@pytest.mark.parametrize(("gold", "pred"), NEEDS_SIMPLIFY)
def test_grade_reports_the_crash(gold: str, pred: str, crashing_sympy_worker: None) -> None:
    result = grade(gold, pred)
    assert result.status == "error" and not result.equal and result.strategy == "sympy"
    # The reason is the exception's last traceback line: its type and message.
    assert result.reason == (
        "SymPy comparison failed: tests.rewards.math.sympy_crash.SympyCrash: simplify crashed (forced by the test)"
    )
    assert "Traceback" in result.traceback


def test_verifier_result_is_error_with_the_exception(crashing_sympy_worker: None) -> None:
    result = MathVerifier()(r"\boxed{x f(x) + f(x)}", r"f(x)(x+1)")
    assert result.status == "error" and result.score is None
    assert "SympyCrash: simplify crashed" in result.info["reason"]
    assert "Traceback" in result.info["traceback"]
    assert result.info["extracted"] == "x f(x) + f(x)" and result.info["strategy"] == "sympy"


def test_score_batch_counts_the_crash(crashing_sympy_worker: None) -> None:
    # The batch runs in this process (WorkerPool(0)), so its SymPy worker is the crashing one.
    scores = score_batch(
        MathVerifier(),
        [r"\boxed{x f(x) + f(x)}", r"\boxed{3}", r"\boxed{4}"],
        [r"f(x)(x+1)", "3", "5"],
        pool=WorkerPool(0),
    )
    assert scores.scores == [None, 1.0, 0.0]
    assert scores.num_errors == 1 and scores.num_timeouts == 0 and scores.num_unscorable == 0
    assert scores.results[0].status == "error"


@pytest.mark.parametrize(("gold", "pred"), [("x^2+1", "x^{2"), ("x^2+1", r"\frac{x"), ("x+1", "x +* 1")])
def test_unparsable_prediction_is_not_equal_not_an_error(gold: str, pred: str) -> None:
    # A leaf that is not LaTeX nor an expression is a wrong answer, not a crash.
    result = grade(gold, pred)
    assert result.status == "ok" and not result.equal and result.strategy == "sympy"
