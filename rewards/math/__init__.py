"""Math answer verification: extract the final answer, then grade it against the gold.

    from rewards.math import extract_answer, is_equivalent
    extract_answer("... so the answer is $\\boxed{\\frac{1}{3}}$.")   # '\\frac{1}{3}'
    is_equivalent("0.3333333333", "\\frac{1}{3}")                     # True (pred, gold)

Modules, one job each: :mod:`~rewards.math.extract` (find the answer),
:mod:`~rewards.math.normalize` (LaTeX clean-up), :mod:`~rewards.math.braces` (brace
matching), :mod:`~rewards.math.numbers` (exact numbers), :mod:`~rewards.math.parse`
(answer structure), :mod:`~rewards.math.compare`
(structural comparison), :mod:`~rewards.math.symbolic` (SymPy, in a worker),
:mod:`~rewards.math.limits` (the time limit), :mod:`~rewards.math.grader` (the
strategy chain) and :mod:`~rewards.math.verifier` (the ``math`` reward verifier).
Importing this package does not import SymPy.
"""

from __future__ import annotations

from rewards.math.extract import (
    GOLD,
    PRED,
    STRICT_PRED,
    ExtractionConfig,
    GoldExtraction,
    PredExtraction,
    extract_answer,
)
from rewards.math.grader import STRATEGIES, Grade, GraderConfig, clear_cache, grade
from rewards.math.verifier import MathVerifier


def verify(gold: str, pred: str, config: GraderConfig | None = None, *,
           gold_extraction: GoldExtraction = GOLD, pred_extraction: PredExtraction = PRED) -> Grade:
    """Extract both answers and grade ``pred`` against ``gold`` (gold first, as in Math-Verify)."""
    gold_answer = extract_answer(gold, gold_extraction)
    if gold_answer is None:
        return Grade(False, "extract", "unscorable", "no answer found in the gold text")
    pred_answer = extract_answer(pred, pred_extraction)
    if pred_answer is None:
        return Grade(False, "extract", "ok", "no answer found in the prediction")
    return grade(gold_answer, pred_answer, config)


def is_equivalent(pred: str, gold: str, config: GraderConfig | None = None, *,
                  gold_extraction: GoldExtraction = GOLD, pred_extraction: PredExtraction = PRED) -> bool:
    """True when ``pred`` is equivalent to ``gold``. Either may be raw LaTeX, ``$``-wrapped,
    ``\\boxed{}`` or a whole solution; the gold answer decides what is expected."""
    return verify(gold, pred, config, gold_extraction=gold_extraction, pred_extraction=pred_extraction).equal


__all__ = [
    "GOLD",
    "PRED",
    "STRATEGIES",
    "STRICT_PRED",
    "ExtractionConfig",
    "GoldExtraction",
    "Grade",
    "GraderConfig",
    "MathVerifier",
    "PredExtraction",
    "clear_cache",
    "extract_answer",
    "grade",
    "is_equivalent",
    "verify",
]
