"""Hugging Face's Math-Verify as a registered verifier (``math_verify``), for the verifier audit
and grader comparisons. Optional: ``pip install -e ".[compare]"``.

Math-Verify's own contract, as its README gives it: ``parse`` then ``verify(gold, pred)`` (gold
first, not symmetric); ``parse`` of the completion extracts its last LaTeX / boxed / plain answer.
"""

from __future__ import annotations

from typing import Any

from rewards.registry import register_verifier
from rewards.types import VerifierResult


@register_verifier("math_verify")
class MathVerifyVerifier:
    """1.0 when Math-Verify judges the completion's answer equal to the reference, else 0.0."""

    def __init__(self) -> None:
        try:
            import math_verify  # noqa: F401
        except ImportError as exc:
            raise ValueError("verifier 'math_verify' needs Hugging Face's Math-Verify: "
                             "pip install -e \".[compare]\" (or pip install math-verify)") from exc

    def __call__(self, completion: str, reference: Any = None, **fields: Any) -> VerifierResult:
        from math_verify import parse, verify

        if reference is None or not str(reference).strip():
            return VerifierResult.unscorable("no reference answer")
        gold = parse(str(reference) if "$" in str(reference) else f"${reference}$")
        pred = parse(completion)
        if not pred:
            return VerifierResult.ok(0.0, extracted=None, reason="Math-Verify found no answer")
        return VerifierResult.ok(1.0 if verify(gold, pred) else 0.0, extracted=str(pred[-1]))
