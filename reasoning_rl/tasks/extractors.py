"""Named functions that turn a dataset's answer field into the reference answer.

A dataset definition picks one by name (``answer_extractor: gsm8k_final``);
adding one is one function and one line in :data:`EXTRACTORS`. They only read the
*reference* side: the model's completion is parsed by the verifier. Training and
evaluation both pass the extracted reference, so the verifier sees the same
``(completion, reference)`` in both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reasoning_rl.errors import UserError
from rewards.math.braces import matching_brace


class ReferenceExtractionError(UserError, ValueError):
    """The reference answer of a row could not be extracted."""


def last_boxed(solution: Any) -> str:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in a MATH solution, braces balanced."""
    text = str(solution)
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        raise ReferenceExtractionError("the solution has no \\boxed{...} answer")
    brace = text.find("{", start)
    if brace < 0:
        raise ReferenceExtractionError("\\boxed is not followed by {")
    close = matching_brace(text, brace)
    if close < 0:
        raise ReferenceExtractionError("unbalanced braces after \\boxed")
    return text[brace + 1:close].strip()


def gsm8k_final(answer: Any) -> str:
    """The number after ``####`` in a GSM8K worked answer, without thousands separators."""
    text = str(answer)
    if "####" not in text:
        raise ReferenceExtractionError("the GSM8K answer has no '#### <number>' line")
    return text.rsplit("####", 1)[1].strip().replace(",", "")


def integer(answer: Any) -> str:
    """An integer answer written canonically: AIME's zero-padded ``"025"`` becomes ``"25"``."""
    try:
        return str(int(str(answer).strip()))
    except ValueError as exc:
        raise ReferenceExtractionError(f"expected an integer answer, got {answer!r}") from exc


def math_gold(solution: Any) -> str:
    """The gold answer the ``math`` verifier itself reads from a worked solution.

    Given the raw solution, the verifier would extract the gold answer itself
    (joining ``\\boxed{-2}, \\boxed{1}`` into ``-2, 1``); extracting it here with the
    same function gives training and evaluation one short reference (the one result files show).
    """
    from rewards.math import GOLD, extract_answer

    answer = extract_answer(str(solution), GOLD)
    if answer is None:
        raise ReferenceExtractionError("the math verifier finds no gold answer in this solution")
    return answer


def identity(answer: Any) -> Any:
    """The field as it is."""
    return answer


EXTRACTORS: dict[str, Callable[[Any], Any]] = {
    "last_boxed": last_boxed,
    "math_gold": math_gold,
    "gsm8k_final": gsm8k_final,
    "integer": integer,
    "identity": identity,
}
