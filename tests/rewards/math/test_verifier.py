"""The `math` verifier's contract with the reward layer."""

from __future__ import annotations

import pickle
import time

import pytest

from rewards import VerifierResult, WorkerPool, get_verifier, list_verifiers, score_batch
from rewards.math import GraderConfig, MathVerifier, grade


def test_registered_under_math() -> None:
    assert "math" in list_verifiers()
    verifier = get_verifier("math", strict=True)
    assert isinstance(verifier, MathVerifier) and verifier.strict
    with pytest.raises(TypeError, match="bad options"):
        get_verifier("math", no_such_option=1)


def test_picklable_and_cheap_to_build() -> None:
    verifier = MathVerifier(sympy_timeout=2.0)
    clone = pickle.loads(pickle.dumps(verifier))
    assert clone.config == verifier.config
    assert len(pickle.dumps(verifier)) < 1000


def test_scores_and_info() -> None:
    verifier = MathVerifier()
    right = verifier(r"... so the answer is $\boxed{\frac{1}{2}}$.", "0.5")
    assert right == VerifierResult.ok(1.0, extracted=r"\frac{1}{2}", gold="0.5", strategy="structure")
    wrong = verifier(r"\boxed{3}", "4")
    assert wrong.status == "ok" and wrong.score == 0.0 and wrong.info["extracted"] == "3"


def test_no_answer_in_completion_scores_zero() -> None:
    result = MathVerifier(strict=True)("I am not sure, maybe 12 or so", "12")
    assert result.status == "ok" and result.score == 0.0 and result.info["extracted"] is None
    assert MathVerifier()("I am not sure, maybe 12 or so", "12").score == 1.0  # last-number fallback


@pytest.mark.parametrize("reference", ["", "   ", None])
def test_unusable_gold_is_unscorable_not_zero(reference: object) -> None:
    result = MathVerifier()(r"\boxed{1}", reference)
    assert result.status == "unscorable" and result.score is None and result.info["reason"]


def test_answer_field() -> None:
    verifier = MathVerifier(answer_field="answer")
    assert verifier(r"\boxed{72}", "ignored", answer="72").score == 1.0
    missing = verifier(r"\boxed{72}", "ignored")
    assert missing.status == "unscorable" and "answer" in missing.info["reason"]


def test_gsm8k_reference_with_marker() -> None:
    reference = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"
    assert MathVerifier()("She sold 72 clips altogether.\n#### 72", reference).score == 1.0
    assert MathVerifier()("The answer is 72.", 72).score == 1.0  # integer references


WEIRD = [
    pytest.param("{" * 5000, id="open-braces"),
    pytest.param(r"\boxed{" + r"\frac{" * 2000, id="nested-frac"),
    pytest.param("(" * 10000 + ")" * 10000, id="nested-parens"),
    pytest.param(r"\boxed{" + "1+" * 20000 + "1}", id="long-sum"),
    pytest.param("\x00\xff\ud7ff", id="binary"),
    pytest.param(r"\boxed{\begin{pmatrix} 1 & \\ \end{pmatrix}}", id="broken-matrix"),
    pytest.param(r"\boxed{= < > \le}", id="only-relations"),
    pytest.param(r"\boxed{[,)}", id="empty-interval"),
    pytest.param(r"\boxed{\frac{1}{0}}", id="division-by-zero"),
    pytest.param(None, id="none"),
    pytest.param(12, id="int"),
]


@pytest.mark.parametrize("completion", WEIRD)
def test_weird_input_never_raises(completion: object) -> None:
    for reference in ("1", r"\frac{1}{0}", "x^2", "{" * 100):
        result = MathVerifier(sympy_timeout=3.0)(completion, reference)  # type: ignore[arg-type]
        assert isinstance(result, VerifierResult)
        assert result.status in ("ok", "unscorable", "timeout", "error")


def test_sympy_timeout_is_reported_and_the_worker_recovers() -> None:
    # Parsing this 99-term sum takes ~0.4 s, far longer than 50 ms: the worker is killed.
    slow = "+".join(rf"\frac{{{i}}}{{x+{i}}}" for i in range(1, 100))
    result = MathVerifier(sympy_timeout=0.05)(rf"\boxed{{{slow}}}", r"\frac{1}{x}")
    assert result.status == "timeout" and result.score is None
    assert "0.05" in result.info["reason"]
    # ... and the next comparison gets a fresh worker.
    assert MathVerifier()(r"\boxed{\sec^2 y}", r"\tan^2 y + 1").score == 1.0


def test_grade_reports_timeouts_instead_of_guessing() -> None:
    slow = "+".join(rf"\frac{{{i}}}{{y+{i}}}" for i in range(1, 100))
    outcome = grade(r"\frac{1}{y}", slow, GraderConfig(sympy_timeout=0.05))
    assert outcome.status == "timeout" and not outcome.equal


def test_inside_score_batch_workers() -> None:
    # A batch worker runs the verifier, which starts its own SymPy worker inside it.
    with WorkerPool(num_workers=1) as pool:
        scores = score_batch(
            MathVerifier(sympy_timeout=10.0),
            [r"\boxed{\sec^2 y}", "The answer is 3", r"\boxed{x^2+2x+1}", "no idea"],
            [r"\tan^2 y + 1", "3", "(x+1)^2", "5"],
            timeout=60.0,
            pool=pool,
        )
    assert scores.scores == [1.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(",".join(str(i) for i in range(3000)), id="long-list"),
        pytest.param(r" \cup ".join(f"[{i},{i + 1}]" for i in range(3000)), id="long-union"),
        pytest.param(r"\{" + ",".join(f"x_{i}" for i in range(200)) + r"\}", id="set-of-200-symbols"),
    ],
)
def test_huge_answers_are_cheap(answer: str) -> None:
    # The cheap path has no time limit, so its cost must stay bounded: matching is n^2,
    # capped to ordered comparison beyond 64 items, and huge answers only compare as strings.
    start = time.perf_counter()
    for gold in ("1", r"\{1, 2\}", answer.replace("1", "7", 1)):
        result = MathVerifier()(rf"\boxed{{{answer}}}", gold)
        assert result.status == "ok" and result.score == 0.0
    assert time.perf_counter() - start < 10.0
