"""Reference extractors on (field, expected) tables."""

from __future__ import annotations

import pytest

from reasoning_rl.tasks.extractors import ReferenceExtractionError, gsm8k_final, integer, last_boxed


@pytest.mark.parametrize(
    ("extract", "field", "expected"),
    [
        (last_boxed, "so $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        (last_boxed, "\\boxed{1} then \\boxed{{2}^{3}}", "{2}^{3}"),
        (gsm8k_final, "She pays 3 * 4 = <<3*4=12>>12\n#### 1,200", "1200"),
        (integer, "025", "25"),
    ],
)
def test_reference_extractors(extract, field: str, expected: str) -> None:
    assert extract(field) == expected


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),   # a set's escaped braces are not counted
        ("\\fbox{7}", "7"),
        ("\\boxed {x^{2}}", "x^{2}"),
    ],
)
def test_last_boxed_balances_braces_as_the_math_verifier_does(field: str, expected: str) -> None:
    assert last_boxed(field) == expected


@pytest.mark.parametrize(("extract", "field"), [(last_boxed, "no box"), (last_boxed, "\\boxed{1"),
                                                (gsm8k_final, "42"), (integer, "4.5")])
def test_unextractable_references_raise(extract, field: str) -> None:
    with pytest.raises(ReferenceExtractionError):
        extract(field)
