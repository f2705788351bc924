"""Plain numbers: parsing and exact/relative comparison, worked by hand."""

from __future__ import annotations

from fractions import Fraction

import pytest

from rewards.math.numbers import decimal_comma_reading, numbers_equal, parse_number


@pytest.mark.parametrize(
    ("text", "value", "exact", "percent"),
    [
        ("42", Fraction(42), True, False),
        ("-5", Fraction(-5), True, False),
        ("7,425,000", Fraction(7425000), True, False),
        ("1 000", Fraction(1000), True, False),
        ("1000.0", Fraction(1000), True, False),      # ".0" loses no precision
        (".4", Fraction(2, 5), False, False),
        ("1.5e-3", Fraction(3, 2000), False, False),   # 1.5 / 1000
        (r"1.5\times10^{-3}", Fraction(3, 2000), False, False),
        ("3/4", Fraction(3, 4), True, False),
        (r"-\frac{10}{9}", Fraction(-10, 9), True, False),
        (r"2\frac{1}{3}", Fraction(7, 3), True, False),  # 2 + 1/3
        ("2 1/3", Fraction(7, 3), True, False),
        ("28%", Fraction(28), True, True),
        ("28 percent", Fraction(28), True, True),
    ],
)
def test_parse_number(text: str, value: Fraction, exact: bool, percent: bool) -> None:
    number = parse_number(text)
    assert number is not None
    assert (number.value, number.exact, number.percent) == (value, exact, percent)


@pytest.mark.parametrize("text", ["x", "1,2", "32, 349", "0,111", "2^{10}", "", "1/0", "12:00"])
def test_not_a_plain_number(text: str) -> None:
    assert parse_number(text) is None


@pytest.mark.parametrize(
    ("gold", "pred", "expected"),
    [
        ("1/12", "0.0833333333333333", True),    # |1/12 - 0.08333..3| / (1/12) = 4e-16 <= 1e-6
        ("1/3", "0.333", False),                 # relative error 1e-3 > 1e-6
        ("16386.16", "16386.17", False),          # rel. error 6e-7 passes the tolerance, but two
                                                  # decimals at 2 places must agree exactly
        ("0.08333333", "0.083333333333", True),   # the longer, rounded to 8 places, is the shorter
        ("28%", "0.28", True),                   # 28/100
        ("28", "28%", True),
        ("1e-30", "2e-30", False),               # relative, never absolute: tiny values stay apart
        ("3", "3.0000001", True),                # rel. error 3.3e-8
        ("3", "4", False),
    ],
)
def test_numbers_equal(gold: str, pred: str, expected: bool) -> None:
    g, p = parse_number(gold), parse_number(pred)
    assert g is not None and p is not None
    assert numbers_equal(g, p, 1e-6) is expected


@pytest.mark.parametrize(
    ("text", "reading"),
    [("1,22", "1.22"), ("0,111", "0.111"), ("1000,99", "1000.99"), ("1,000", None), ("1, 22", None), ("1,2,3", None)],
)
def test_decimal_comma_reading(text: str, reading: str | None) -> None:
    assert decimal_comma_reading(text) == reading
