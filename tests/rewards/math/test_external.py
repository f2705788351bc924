"""The ``math_verify`` verifier (Hugging Face's Math-Verify, the ``audit`` extra) and an audit with it.

Skipped when Math-Verify is not installed (``pip install -e ".[audit]"``; the ``dev`` extra pins it).
The expected verdicts are Math-Verify 0.9.0's, measured 2026-12-05; the last table row is a
Math-Verify#14 case where it and our checker disagree (1/2006! is not 1/2004!).
"""

from __future__ import annotations

import pytest

pytest.importorskip("math_verify")

from rewards import get_verifier
from rewards.audit import VerifierAudit
from rewards.pool import WorkerPool
from rewards.specs import AuditConfig

TABLE = [
    # (reference, completion, Math-Verify's score, what it extracted)
    ("0.5", r"\boxed{\frac{1}{2}}", 1.0, r"\frac{1}{2}"),
    ("4", r"\boxed{3}", 0.0, "3"),
    ("12", "the sum is 12", 1.0, "12"),
    ("4", "no answer here", 0.0, None),
    (r"\frac{1}{2004!}", r"The answer is \boxed{\frac{1}{2006!}}", 1.0, r"\frac{1}{2006!}"),
]


@pytest.mark.parametrize(("reference", "completion", "score", "extracted"), TABLE)
def test_math_verify_scores_and_extracts(reference: str, completion: str, score: float, extracted: str | None) -> None:
    result = get_verifier("math_verify")(completion, reference)
    assert (result.score, result.info["extracted"]) == (score, extracted)


def test_math_verify_without_reference_is_unscorable() -> None:
    assert get_verifier("math_verify")("x = 1", "").status == "unscorable"


def test_audit_with_math_verify_reports_the_disagreement() -> None:
    # Three completions, all audited. ours (math): 1, 0, 1. Math-Verify: 1, 1, 1.
    # One disagreement (the 1/2006! row): ours fails, theirs passes; rate 1/3.
    completions = [r"\boxed{\frac{1}{2}}", r"The answer is \boxed{\frac{1}{2006!}}", "the sum is 12"]
    references = ["0.5", r"\frac{1}{2004!}", "12"]
    ours_verifier = get_verifier("math")
    ours = [ours_verifier(c, r) for c, r in zip(completions, references)]
    audit = VerifierAudit(AuditConfig(verifier="math_verify", fraction=1.0))
    with WorkerPool(1) as pool:
        report = audit.run(completions, references, [{}, {}, {}], ours, step_seed=3, pool=pool)
    assert report.metrics["audit/ours_fail_theirs_pass"] == 1
    assert report.metrics["audit/ours_pass_theirs_fail"] == 0
    assert report.metrics["audit/disagree_rate"] == pytest.approx(1 / 3)
    assert [row["theirs"]["extracted"] for row in report.rows] == [r"\frac{1}{2006!}"]
