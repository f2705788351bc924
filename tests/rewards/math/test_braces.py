"""``matching_brace`` on a (text, open_index, expected) table."""

from __future__ import annotations

import pytest

from rewards.math.braces import matching_brace
from rewards.math.extract import extract_answer
from rewards.math.normalize import normalize

CASES = [
    # (text, open_index, expected index of the closing brace)
    ("{}", 0, 1),
    ("{a{b}c}", 0, 6),
    ("{a{b}c}", 2, 4),  # an inner brace closes at its own partner
    ("{a} b}", 0, 2),  # the first closing brace at depth 0 wins; the rest is not looked at
    (r"\boxed{\frac{1}{2}} = x", 6, 18),  # \f escapes only the f: command names are harmless
    ("{\n}", 0, 2),
    # unbalanced
    ("{", 0, -1),
    ("{a{b}", 0, -1),
    ("{\\", 0, -1),  # a lone trailing backslash
    # escapes: a backslash escapes the one character after it
    (r"{\{1, 2\}}", 0, 9),  # a set's \{ \} are not counted
    (r"{\}", 0, -1),  # an escaped closing brace closes nothing
    (r"{a\\}", 0, 4),  # \\ is an escaped backslash (a LaTeX line break): the } after it counts
    (r"{\\\}}", 0, 5),  # \\ then \} (escaped) then the closing brace
    ("x{\\\n}}", 1, 4),  # a backslash before a newline escapes the newline only
]


@pytest.mark.parametrize(("text", "open_index", "expected"), CASES)
def test_matching_brace(text: str, open_index: int, expected: int) -> None:
    assert matching_brace(text, open_index) == expected


@pytest.mark.parametrize(("text", "open_index"), [("a{b}", 0), ("{a}", 3), ("{a}", -1), ("", 0)])
def test_index_must_point_at_an_opening_brace(text: str, open_index: int) -> None:
    with pytest.raises(ValueError, match=r"index of a '\{'"):
        matching_brace(text, open_index)


def test_extraction_and_normalisation_use_it() -> None:
    # The same escape rules on both sides: \} inside a box does not end it, and the
    # outer braces of {\{1\}} are one pair that normalisation removes.
    assert extract_answer(r"so $\boxed{\{1, 2\}}$.") == r"\{1, 2\}"
    assert normalize(r"{\{1\}}") == r"\{1\}"
    assert normalize(r"{1} + {2}") == r"{1} + {2}"  # the first { closes before the end: kept
