"""Regression cases from verifier bug reports: (gold, pred, expected) tables, each row with its source.

The cases are what users reported against Math-Verify; the expected value is the mathematically
right verdict, whatever Math-Verify answered. Our checker gets every row right (measured when the
table was written); a row it gets wrong in future would carry an xfail mark with its reason.
Math-Verify#76 was not in the issue corpus searched (the stored copy of GitHub issues, searched by
meaning and by the exact string "Math-Verify/issues/76" on 2026-12-05), so it is not here; #60 is.
A row our checker gets wrong in future would carry an xfail mark with its reason.
"""

from __future__ import annotations

import pytest

from rewards.math import is_equivalent

MV = "https://github.com/huggingface/Math-Verify/issues/"

CASES = [
    # Math-Verify#60: two different linear equations both parsed to 0 and were judged equal.
    ("3*x-1*y+13=0", "3x + 4y + 14=0", False, MV + "60"),
    ("3x + 4y + 14=0", "6x + 8y + 28 = 0", True, MV + "60 (the same line, scaled)"),
    # Math-Verify#37: \text{13} against 13 was False (fixed in Math-Verify 0.8.0).
    (r"$\text{13}$", "$13$", True, MV + "37"),
    # Math-Verify#1: "2/3" was parsed as 2 and failed against \frac{2}{3}.
    ("2/3", r"\frac{2}{3}", True, MV + "1"),
    # Math-Verify#35: \frac12 is \frac{1}{2}.
    (r"$\frac12$", r"$\frac{1}{2}$", True, MV + "35"),
    # Math-Verify#34: mixed numbers outside LaTeX, and 2 1/2 in LaTeX against 2.5.
    ("2.5", r"$2\frac{1}{2}$", True, MV + "34"),
    ("5/4", "1 1/4", True, MV + "34"),
    # Math-Verify#26: an equation and the same equation solved for y.
    ("$2x+4y-3=0$", r"$y = -\frac{1}{2}x + \frac{3}{4}$", True, MV + "26"),
    # Math-Verify#14: tiny values, equations whose right-hand sides differ, +-, lists, times of day.
    (r"$\frac{1}{2^{99}}$", r"$\frac{1}{2^{98}}$", False, MV + "14"),
    ("$n=2, 3, 4$", "$n=1, 2, 3$", False, MV + "14"),
    ("$D = (0, 1)$", "$D = (0, 1.5)$", False, MV + "14"),
    (r"$19, 46, \text{ and } 82$", "$21, 36, and 82$", False, MV + "14"),
    (r"$1 - \frac{1}{\mathrm{e}}$", r"$1 + \frac{1}{\mathrm{e}}$", False, MV + "14"),
    (r"$\pm 2021$", "$2021$", False, MV + "14"),
    ("$12:00$", "$1:00$", False, MV + "14"),
    # Math-Verify#47: a prediction with only one of the two required answers was judged correct.
    ("1331 and 1728", "1728", False, MV + "47"),
    # Math-Verify#10 / #25 / #71: an interval in the gold and the same set written as an inequality.
    ("$(0, 12.5)$", "$0 < x < 12.5$", True, MV + "10"),
    (r"$(-\infty, 3)$", "$x<3$", True, MV + "71"),
    (r"$m \in [\sqrt{2}, +\infty)$", r"$m \geq \sqrt{2}$", True, MV + "25"),
    # Math-Verify#2: rounded decimals, tuples with a decimal, and a fraction against a rounding.
    (r"\frac{1}{12}", "0.0833333333333333", True, MV + "2"),
    (r"(1,\frac{9}{2})", "(1,4.5)", True, MV + "2"),
    (r"\frac{x+2}{7}", r"\frac{x}{7}+\frac{2}{7}", True, MV + "2"),
    ("33.3", r"\frac{100}{3}", False, MV + "2 (33.3 is a rounding, not 100/3)"),
    # Math-Verify#67: a percentage against the bare number (asked for as a feature; we accept it).
    (r"$28\%$", "28", True, MV + "67"),
    # Math-Verify#56: a tuple whose second coordinate differs.
    (r"\left( 3, \frac{\pi}{2} \right)", r"(3, \frac{2\pi}{3})", False, MV + "56"),
    # Math-Verify#69 (verl's compute_score wrapping the gold in \boxed{}): a complex number in
    # plain-text form, and a big-O class that is not the gold's Theta class.
    ("14 - i", "14.0 + -1.0i", True, MV + "69"),
    (r"O(\log \log n)", "Theta(log log n)", False, MV + "69 (O and Theta are different classes)"),
    # Math-Verify#41: 4 sqrt(2) (written with parentheses) is not 4.
    ("$4$", r"$4\sqrt(2)$", False, MV + "41"),
    # Math-Verify#14: more values too small or too alike for a float comparison, and sequences.
    (r"$\frac{1}{2004!}$", r"$\frac{1}{2006!}$", False, MV + "14"),
    (r"$\frac{2^{2005}+1}{3 \cdot 2^{2006}}$", r"$\frac{1}{3 \cdot 2^{2006}}$", False, MV + "14"),
    (r"$1, 2, \ldots, n$", r"$1, 3, 5, \ldots, 2n-1$", False, MV + "14"),
    (r"$F_n = \sum_{k=0}^{n-1} F_k F_{n-k-1}$", r"$F_n = \sum_{k=0}^{n-2} F_k F_{n-k-2}$", False, MV + "14"),
    # Math-Verify#69: predictions in SymPy's plain-text spelling (pi, exp()); until 2026-12-05 we
    # read `pi` and `exp` as variables (p*i) and the bare text as prose, and said no.
    ("e^{16} - 1", "-1 + exp(16)", True, MV + "69"),
    (r"\dfrac{\pi}{2}", "pi/2", True, MV + "69"),
    (r"-2\pi", "-2*pi", True, MV + "69"),
    (r"\dfrac{\pi}{2}", "pi/3", False, MV + "69 (a different multiple of pi)"),
]



@pytest.mark.parametrize(("gold", "pred", "expected", "source"), CASES,
                         ids=[f"{c[3].rsplit('/', 1)[-1].split()[0]}:{c[0]}" for c in CASES])
def test_bug_report_cases(gold: str, pred: str, expected: bool, source: str) -> None:
    assert is_equivalent(pred, gold) is expected, source

