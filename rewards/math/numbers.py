"""Plain numbers, parsed and compared without SymPy.

Handles integers with thousands separators (``7,425,000``, ``1 000``), decimals
(``.4``, ``1000.0``), scientific notation (``1.5e-3``, ``1.5\\times10^{-3}``),
fractions (``3/4``, ``\\frac{3}{4}``, ``-\\frac{10}{9}``), mixed numbers
(``2\\frac{1}{3}``) and percentages (``28\\%``).

Values are kept as exact :class:`fractions.Fraction`. A number written with a
decimal point is *inexact*: it may be a rounded value, so it equals an exact value
within a relative tolerance (``0.0833333333333333`` = ``1/12``). Two exact values
must be identical, so tiny but different values stay different
(``1/2^99`` != ``1/2^98``): the tolerance is relative, never absolute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_INT = r"(?:[1-9]\d{0,2}(?:,\d{3})+|[1-9]\d{0,2}(?: \d{3})+(?![\d/])|\d+)"
_DEC = rf"(?:{_INT}(?:\.\d*)?|\.\d+)"
_EXP = r"(?:\s*(?:e|E)\s*([+-]?\d+)|\s*(?:\\times|\\cdot|\*|x)\s*10\s*\^\s*\{?\s*([+-]?\d+)\s*\}?)?"
_SIMPLE_RE = re.compile(rf"^([+-]?)\s*({_DEC}){_EXP}$")
_FRAC_RE = re.compile(r"^([+-]?)\s*\\frac\{\s*([+-]?[\d.]+)\s*\}\{\s*([+-]?[\d.]+)\s*\}$")
_SLASH_RE = re.compile(r"^([+-]?)\s*([\d.]+)\s*/\s*([\d.]+)$")
_MIXED_RE = re.compile(r"^([+-]?)\s*(\d+)\s*(?:\\frac\{\s*(\d+)\s*\}\{\s*(\d+)\s*\}|\s(\d+)\s*/\s*(\d+))$")
_PERCENT_RE = re.compile(r"\s*(?:%|percent(?:age)?|pct)\s*$")


@dataclass(frozen=True)
class Number:
    """A parsed number: ``value`` exactly as written, ``exact`` False when it was
    written with a decimal point (so may be rounded), ``percent`` when a ``%`` followed."""

    value: Fraction
    exact: bool = True
    percent: bool = False
    decimals: int = 0  # digits after the decimal point, for inexact numbers


def parse_number(text: str) -> Number | None:
    """Parse ``text`` (a normalised answer) as one number; ``None`` when it is not one."""
    s = text.strip()
    if not s or len(s) > 80:
        return None
    percent = False
    m = _PERCENT_RE.search(s)
    if m:
        percent, s = True, s[: m.start()].strip()
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1].strip()
    number = _parse_plain(s)
    if number is None:
        return None
    return Number(number.value, number.exact, percent, number.decimals)


def _parse_plain(s: str) -> Number | None:
    m = _SIMPLE_RE.match(s)
    if m:
        sign, body, exp1, exp2 = m.groups()
        return _decimal(sign, body, exp1 or exp2)
    m = _MIXED_RE.match(s)
    if m:
        sign, whole, n1, d1, n2, d2 = m.groups()
        num, den = int(n1 or n2), int(d1 or d2)
        if den == 0 or num >= den:  # "2 5/3" is not a mixed number
            return None
        value = int(whole) + Fraction(num, den)
        return Number(-value if sign == "-" else value)
    m = _FRAC_RE.match(s) or _SLASH_RE.match(s)
    if m:
        sign, num_text, den_text = m.groups()
        num, den = _decimal("", num_text, None), _decimal("", den_text, None)
        if num is None or den is None or den.value == 0:
            return None
        value = num.value / den.value
        exact = num.exact and den.exact
        return Number(-value if sign == "-" else value, exact, decimals=max(num.decimals, den.decimals))
    return None


def _decimal(sign: str, body: str, exponent: str | None) -> Number | None:
    body = body.replace(",", "").replace(" ", "")
    if body.startswith("+") or body.startswith("-"):
        sign, body = ("-" if (sign == "-") != body.startswith("-") else ""), body[1:]
    if not body or body == ".":
        return None
    try:
        value = Fraction(body)
    except (ValueError, ZeroDivisionError):
        return None
    decimals = len(body.split(".", 1)[1]) if "." in body else 0
    exact = "." not in body or decimals == 0 or (body.endswith(".0") and set(body.split(".", 1)[1]) == {"0"})
    if exponent is not None:
        e = int(exponent)
        if abs(e) > 400:
            return None
        value *= Fraction(10) ** e
    return Number(-value if sign == "-" else value, exact, decimals=decimals)


def numbers_equal(gold: Number, pred: Number, rel_tol: float) -> bool:
    """Equal values; a percentage also equals its fraction (``28%`` = ``28`` = ``0.28``).

    Exact against exact: identical :class:`Fraction`. When either side was written
    with a decimal point: within ``rel_tol`` of each other, and two decimals must
    also agree when the longer one is rounded to the places of the shorter one.
    """
    for g in _readings(gold):
        for p in _readings(pred):
            if _values_equal(g, p, gold, pred, rel_tol):
                return True
    return False


def _readings(n: Number) -> list[Fraction]:
    return [n.value, n.value / 100] if n.percent else [n.value]


def _values_equal(g: Fraction, p: Fraction, gold: Number, pred: Number, rel_tol: float) -> bool:
    if g == p:
        return True
    if gold.exact and pred.exact:
        return False
    if abs(g - p) > Fraction(rel_tol) * max(abs(g), abs(p)):
        return False
    if not gold.exact and not pred.exact and gold.decimals != pred.decimals:
        places = min(gold.decimals, pred.decimals)
        return round(g, places) == round(p, places)
    return gold.exact != pred.exact  # one exact value and one rounded decimal


_DECIMAL_COMMA_RE = re.compile(r"^[+-]?\d+,\d+$")


def decimal_comma_reading(text: str) -> str | None:
    """``1,22`` -> ``1.22``: the continental decimal-comma reading of a text that could
    also be the list ``1, 22``; ``None`` when there is no such reading (``1,000`` is a
    thousands separator, ``1, 22`` with a space is a list)."""
    s = text.strip()
    if not _DECIMAL_COMMA_RE.match(s) or parse_number(s) is not None:
        return None
    return s.replace(",", ".")
