"""Answer equivalence: (gold, pred, expected) tables, one per kind of answer.

``verify(gold, pred)`` is not symmetric: the gold decides what is expected.
"""

from __future__ import annotations

import pytest

from rewards.math import is_equivalent, verify

NUMBERS = [
    ("42", "42", True),
    ("7425000", "7,425,000", True),       # thousands separators
    ("1000", "1 000", True),
    ("11111111100", r"\boxed{11,\! 111,\! 111,\! 100}", True),
    ("32349", r"\boxed{32, 349}", False),  # a space after the comma: a list, not 32,349
    ("1000", "1000.0", True),             # decimals
    ("0.4", ".4", True),
    ("1.22", "1,22", True),               # a decimal comma, read when the other side is one number
    ("-2,1", "-2.1", True),
    ("-2,1", "1, -2", True),              # ... and a list when the other side is a list
    (r"\frac{1}{12}", "0.0833333333333333", True),  # an exact value and a rounded decimal
    (r"\frac{1}{3}", "0.33", False),      # too coarse for the relative tolerance 1e-6
    ("16386.16", "16386.17", False),       # two decimals must agree
    ("3/4", r"\frac{3}{4}", True),         # fractions
    ("-10/9", r"-\frac{10}{9}", True),
    (r"\frac{7}{3}", r"2\frac{1}{3}", True),  # mixed number
    ("0.0015", r"1.5\times10^{-3}", True),    # scientific notation
    ("0.0015", "1.5e-3", True),
    (r"28\%", "28 percent", True),         # percentages
    (r"28\%", "0.28", True),
    (r"28\%", "29", False),
    ("1000.99", "so the number is 10 which is 1,000.99m²", True),  # last number, units glued
    ("2", "AZYUK2A", False),               # never a digit glued inside a word
]

TINY_VALUES = [  # Math-Verify judges these equal (absolute tolerance); they are not
    (r"\frac{1}{2^{99}}", r"\frac{1}{2^{98}}", False),
    (r"\frac{1}{2004!}", r"\frac{1}{2006!}", False),
    (r"\frac{1}{2^{99}}", r"2^{-99}", True),
    ("1e-30", "2e-30", False),
    # ... and huge values are not equal for being relatively close either
    ("2^{2005}", "2^{2005}+1", False),
    (r"\sqrt{2}\cdot 10^{100}", r"\sqrt{2}\cdot 10^{100}+1", False),
    ("x + 2^{2005}", "x + 2^{2005} + 1", False),
    (r"\sin^2(1)+\cos^2(1)", "1", True),
    (r"\sqrt{8}", r"2\sqrt{2}", True),
]

SYMBOLIC = [
    (r"\frac{x+2}{7}", r"\frac{x}{7}+\frac{2}{7}", True),
    (r"\tan^2(y)+1", r"\sec^2(y)", True),
    (r"\sqrt{17}", "4.123105625617661", True),
    (r"\frac{5\sqrt{42}}{27}", r"\frac{10\sqrt{10.5}}{27}", True),
    (r"\frac{9}{4}\pi", r"\frac94\pi", True),
    (r"\sqrt{3}", r"\sqrt3", True),
    (r"(a+5)(b+2)", r"(+5)(b+2)", False),
    ("2", r"\frac{1+\sqrt{5}}{2}", False),
    (r"x+2n+1", "x+1", False),
    (r"1\sqrt{19}", "1", False),            # not fooled by the last number of an expression
    (r"4", r"4\sqrt{2}", False),
    ("f(x)", "f(y)", False),
    ("10", r"(9+1)", True),
    (r"\frac{\sqrt{3}}{9}", r"\frac{\sqrt{3}}{0}", False),  # a division by zero equals nothing
    (r"\infty", r"-\infty", False),
    ("1 - \\frac{1}{e}", "1 - \\frac{1}{\\mathrm{e}}", True),
]

STRUCTURES = [
    # tuples: order matters
    (r"(1,\frac{9}{2})", "(1,4.5)", True),
    ("(3,1)", "(1,3)", False),
    # sets and unordered lists: order does not
    (r"\{1, 2, 3\}", r"\{3, 1, 2\}", True),
    ("-2,1", r"\boxed{1, -2}", True),
    ("1, 2, 3", "1, 2", False),
    ("(2,1),(1,2),(-1,-20),(-20,-1)", r"\boxed{(1, 2)}, \boxed{(2, 1)}, \boxed{(-1, -20)}, \boxed{(-20, -1)}", True),
    ("(1,3)", r"\{1,3\}", True),           # the gold tuple decides: compared in order
    (r"\pm 2021", r"\{-2021, 2021\}", True),
    (r"\pm 2021", "2021", False),
    (r"\{1\pm\sqrt{5},-2\}", r"\{-2, 1-\sqrt{5}, 1+\sqrt{5}\}", True),
    ("19, 46, and 82", r"19, 46, \text{ and } 82", True),
    ("19, 46, and 82", "21, 36, and 82", False),
    # intervals: bracket types matter
    ("[0,1)", "[0,1)", True),
    ("(0,9)", "[0,9)", False),
    ("[0,9)", "[0,1)", False),
    (r"[-1, -\frac{1}{2}) \cup (-\frac{1}{2}, 0)", r"[-1, -\tfrac12) \cup (-\tfrac12, 0)", True),
    (r"(-\infty, -3] \cup [2, \infty)", r"[2, \infty) \cup (-\infty, -3]", True),
    # matrices
    (r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}", r"\left[\begin{array}{cc}1 & 2 \\3 & 4\end{array}\right]", True),
    (r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}", r"\begin{bmatrix}1 & 2 \\ 3 & 5\end{bmatrix}", False),
    (r"\begin{pmatrix}6 & 8 \\ 10 & 12\end{pmatrix}",
     r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} + \begin{pmatrix}5 & 6 \\ 7 & 8\end{pmatrix}", True),
]

RELATIONS = [
    ("3", "x = 3", True),                  # a name and its value
    ("x = 3", "3", True),
    ("2x+1", "y = 2x+1", True),
    ("7 = 11a+c", "11a+c", False),         # a genuine equation is not its right side
    ("x+z=1", "1", False),
    ("a^2 + b = 0", "0", False),
    (r"\frac{NO}{BO}=\frac{1}{\sqrt{6}}", r"\frac{1}{\sqrt{6}}", True),
    ("(p,q)=(3,2)", "(3,2)", True),
    ("x = 11", "x = 5+5+1 = 7 = 11", True),  # a chain: its last side
    ("11", r"x \approx 11", True),
    ("x = y", "x = y", True),              # Math-Verify: bare `x = y` vs itself was a false negative
    ("2x+4y-3=0", r"y=-\frac{1}{2}x+\frac{3}{4}", True),   # equations up to a constant factor
    ("34x+45y-20z+100=0", "-34x-45y+20z-100=0", True),
    ("x^2/4 + y^2/3 = 1", "x^2/16 + y^2/12 = 1/4", True),
    ("x+y=1", "x-y=1", False),
    (r"x \le 5", r"5 \ge x", True),        # inequalities
    ("x < 1", "-x > -1", True),
    ("x < 1", "x > -1", False),
    (r"x \geq 5", r"x \leq 5", False),
    (r"x \ne 3", "x != 3", True),
    (r"-2 \le x \le 7", r"x \in [-2,7]", True),
    ("-793 < a < 10", "(-793, 10)", True),
    (r"k \ge 2", r"[2, \infty)", True),
    (r"1\leq|z|\leq \frac{3}{2}", r"z \in [-\frac{3}{2}, -1] \cup [1, \frac{3}{2}]", True),
    ("a_3 = 2, a_{37} = 19", r"a_{37} = 19, \quad a_3 = 2", True),  # named values, any order
    ("AB=4,CD=5", "4, 5", True),
    ("p=5,q=2;p=7,q=2", "(5,2),(7,2)", True),
    (r"W(n) = 1 \text{ and } W(n) = -1", "W(x)=1orW(x)=-1", True),  # "or" glued, spaces lost
    ("X = 1 or X = 2", "X=1orX=3", False),
]

TEXT_AND_FORMAT = [
    (r"90^\circ", "90", True),             # degrees
    (r"\frac{1}{3}", r"\frac{1}{3} \text{meters}", True),  # units
    (r"15\mbox{ cm}^2", "15", True),
    ("125 miles", r"\boxed{125\textnormal{ miles}}", True),
    (r"\frac{1}{3}", r"\left( \frac{1}{3} \right)", True),
    (r"\frac{1}{3}", r"\dfrac{1}{3}", True),
    (r"\text{(C)}", r"\text{C}", True),    # multiple choice
    ("C", "(C)", True),
    ("(C)", "[C)", False),
    ("d", r"\text{E}", False),
    (r"\text{Evelyn}", r"\boxed{\text{Evelyn}}", True),  # names
    ("Evelyn", "Briana", False),
    (r"\text{odd}", "Odd", True),
    ("12:00", "1:00", False),
    ("204_5", "204_{5}", True),             # numerals in another base: digits and base must match
    ("204_5", "204_6", False),
    ("1112112_3", "1112122_3", False),
    (r"\$16,\!386.20", "16386.20", True),   # currency
]


@pytest.mark.parametrize(
    ("gold", "pred", "expected"),
    NUMBERS + TINY_VALUES + SYMBOLIC + STRUCTURES + RELATIONS + TEXT_AND_FORMAT,
)
def test_equivalence(gold: str, pred: str, expected: bool) -> None:
    grade = verify(gold, pred)
    assert grade.status == "ok", grade
    assert grade.equal is expected, grade


@pytest.mark.parametrize(
    ("gold", "pred", "expected"),
    [
        (r"$\frac{1}{3}$", r"The answer is $\boxed{\dfrac13}$.", True),
        (r"\boxed{(3, \frac{\pi}{2})}", r"so $\left( 3, \frac{\pi}{2} \right)$", True),
        ("$9$", "Answer $$ \n 9 \n $$", True),
        ("#### 18", "She makes 9 * 2 = $18 every day.\n#### 18", True),
        ("$5$", "$x = 5$ and then $y = 7$ so the answer is $7$", False),
    ],
)
def test_either_side_may_be_wrapped(gold: str, pred: str, expected: bool) -> None:
    # is_equivalent takes (pred, gold), verify (gold, pred), as in the issue
    assert is_equivalent(pred, gold) is expected


def test_cheap_strategies_decide_plain_numbers_without_sympy() -> None:
    for gold, pred in [("42", "42.0"), ("7425000", "7,425,000"), (r"\frac{1}{2}", "0.5"), ("(1, 2)", "(1,2)")]:
        grade = verify(gold, pred)
        assert grade.equal and grade.strategy in ("string", "structure"), grade
