"""The ``math`` verifier of the reward layer: extract, then grade.

``MathVerifier()(completion, reference)`` extracts the final answer of the model's
completion and the gold answer from ``reference`` (a bare answer such as ``"42"`` or
``"$\\frac{1}{3}$"``, a full solution with ``\\boxed{}`` / ``#### 42``, or a list of
answers such as OlympiadBench's ``["$2$", "$-3$"]``, which is one list answer ``2, -3``), then
grades them with :func:`rewards.math.grader.grade`:

* ``ok`` with score 1.0 / 0.0 -- compared (no answer found in the completion is 0.0);
* ``unscorable`` -- the reference holds no usable answer (never silently 0);
* ``timeout``    -- the SymPy comparison passed its time limit and was killed;
* ``error``      -- the comparison failed (SymPy raised, its worker died, odd input);
  ``info["reason"]`` says why, ``info["traceback"]`` holds SymPy's traceback when there is one.
"""

from __future__ import annotations

from typing import Any

from rewards.math.extract import GOLD, PRED, STRICT_PRED, extract_answer
from rewards.math.grader import GraderConfig, grade
from rewards.math.normalize import strip_math_delimiters
from rewards.registry import register_verifier
from rewards.types import VerifierResult


@register_verifier("math")
class MathVerifier:
    """Score 1.0 when the completion's final answer equals the reference answer.

    Options (all plain values, so instances pickle cheaply to batch workers):
    ``strict`` -- only explicit answer markers count in the completion (no
    last-formula / last-number fallback); ``float_rel_tol``, ``sympy_timeout``,
    ``use_sympy``, ``numeric_points`` -- see :class:`GraderConfig`; ``answer_field``
    -- when set, the gold answer is read from ``fields[answer_field]`` instead of
    ``reference``.
    """

    def __init__(
        self,
        strict: bool = False,
        float_rel_tol: float = 1e-6,
        sympy_timeout: float = 5.0,
        use_sympy: bool = True,
        numeric_points: int = 5,
        answer_field: str | None = None,
    ) -> None:
        self.strict = strict
        self.answer_field = answer_field
        self.config = GraderConfig(
            float_rel_tol=float_rel_tol,
            use_sympy=use_sympy,
            sympy_timeout=sympy_timeout,
            numeric_points=numeric_points,
        )

    def __call__(self, completion: str, reference: Any, **fields: Any) -> VerifierResult:
        if self.answer_field is not None:
            if self.answer_field not in fields:
                return VerifierResult.unscorable(
                    f"field {self.answer_field!r} is missing; fields present: {sorted(fields)}"
                )
            reference = fields[self.answer_field]
        if reference is None or (isinstance(reference, str) and not reference.strip()):
            return VerifierResult.unscorable("the reference answer is empty")
        if isinstance(reference, (list, tuple)):
            reference = list_reference(reference)
        if not isinstance(reference, str):
            reference = str(reference)  # GSM8K-style integer answers
        gold = extract_answer(reference, GOLD)
        if gold is None:
            return VerifierResult.unscorable("no answer found in the reference", reference=reference[-200:])
        if not isinstance(completion, str):
            return VerifierResult.error(f"the completion must be a string, got {type(completion).__name__}")
        pred = extract_answer(completion, STRICT_PRED if self.strict else PRED)
        if pred is None:
            return VerifierResult.ok(0.0, extracted=None, gold=gold, reason="no answer found in the completion")
        result = grade(gold, pred, self.config)
        info = {"extracted": pred, "gold": gold, "strategy": result.strategy}
        if result.status == "ok":
            return VerifierResult.ok(1.0 if result.equal else 0.0, **info)
        if result.status == "unscorable":
            return VerifierResult.unscorable(result.reason, **info)
        if result.status == "timeout":
            return VerifierResult.timeout(self.config.sympy_timeout, **info)
        if result.traceback:
            info["traceback"] = result.traceback
        return VerifierResult.error(result.reason, **info)

    def __repr__(self) -> str:
        return f"MathVerifier(strict={self.strict}, config={self.config})"


def list_reference(answers: list[Any] | tuple[Any, ...]) -> str:
    """Several gold answers (OlympiadBench's ``final_answer`` list) as one list answer ``a, b``:
    each element's own answer (``$...$`` removed), joined by commas, which the grader compares
    as an unordered list, as it does a completion's ``\\boxed{2}, \\boxed{-3}``."""
    parts = [extract_answer(str(a), GOLD) for a in answers]
    return ", ".join(strip_math_delimiters(p).strip() for p in parts if p)
