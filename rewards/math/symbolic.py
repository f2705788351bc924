"""SymPy comparison of leaves and relations: the expensive end of the grader.

Runs in a worker process under a hard time limit (see :mod:`rewards.math.limits`);
nothing here is imported by the cheap path. Two expressions are equal when

1. they are the same SymPy tree, or
2. they agree numerically. When either side contains a decimal (a rounded value):
   within ``float_rel_tol``, *relative* (``|a - b| <= tol * max(|a|, |b|)``), so tiny
   values are never equal just for being small (``1/2^99`` != ``1/2^98``). When both
   are exact constants: their difference is zero (exactly for rationals, else SymPy's
   adaptive evaluation at 50 digits certifies a non-zero difference or finds none), so
   ``2^{2005} + 1`` != ``2^{2005}``. Expressions with free symbols: at several random
   points, within 1e-12 relative and with no certified non-zero difference;
3. the numbers cannot be computed (undefined functions, symbolic sums): ``simplify(a - b) == 0``.

A leaf that does not parse (not LaTeX, not an expression) is simply not equal. Once
both sides are parsed, an exception raised by SymPy while comparing them is not a
verdict: it propagates out of :func:`compare_with_sympy`, and the grader reports the
comparison as ``status="error"`` with the exception in its reason. (The narrow
``TypeError``/``ValueError`` catches around numeric evaluation are SymPy's way of
saying "this is not a number", which moves on to the next test; they are not crashes.)

Random points are drawn from a fixed seed in [0.5, 2.5] (positive, so square roots
and logarithms stay real), which makes the verdict reproducible; identities that
hold only for positive values (``\\sqrt{x^2} = x``) are accepted -- a known limit.
"""

from __future__ import annotations

import functools
import random
import re
from typing import Any

from rewards.math.compare import Comparer, Verdict, compare
from rewards.math.parse import Leaf, Matrix, Node, Relation

_EXACT_CONSTANT_TOL = 1e-30
_EXACT_POINT_TOL = 1e-12
_DIGITS = 50


class SympyComparer(Comparer):
    """The cheap comparer, then SymPy for whatever it could not decide. Never returns None."""

    def __init__(self, float_rel_tol: float = 1e-6, numeric_points: int = 5) -> None:
        super().__init__(float_rel_tol)
        self.numeric_points = numeric_points

    def leaf(self, gold: str, pred: str) -> Verdict:
        cheap = super().leaf(gold, pred)
        if cheap is not None:
            return cheap
        g, p = to_sympy(gold), to_sympy(pred)
        if g is None or p is None:
            return False
        return objects_equal(g, p, self.float_rel_tol, self.numeric_points)

    def relation(self, gold: Relation, pred: Relation) -> Verdict:
        cheap = super().relation(gold, pred)
        if cheap is not None:
            return cheap
        return relations_equal(gold, pred, self.float_rel_tol, self.numeric_points)

    def matrix_expression(self, gold: Node, pred: Node) -> Verdict:
        g = to_sympy(gold.source if isinstance(gold, Matrix) else gold.text if isinstance(gold, Leaf) else "")
        p = to_sympy(pred.source if isinstance(pred, Matrix) else pred.text if isinstance(pred, Leaf) else "")
        if g is None or p is None:
            return False
        return objects_equal(g, p, self.float_rel_tol, self.numeric_points)


def compare_with_sympy(gold: Node, pred: Node, float_rel_tol: float, numeric_points: int) -> bool:
    """Entry point run in the worker process: a full structural comparison with SymPy leaves."""
    return compare(gold, pred, SympyComparer(float_rel_tol, numeric_points)) is True


# Plain-text names read as the constant / function, not as products of letters (p*i, E*x*p):
# Math-Verify#69 (verl's scorer, predictions such as `-1 + exp(16)`, `pi/2`, `-2*pi`).
_PLAIN_NAMES = re.compile(r"(?<![A-Za-z])(?:pi(?![A-Za-z])|(?:exp|sin|cos|tan|log|ln|sqrt)(?=\())")


@functools.lru_cache(maxsize=4096)
def to_sympy(latex: str) -> Any:
    """Parse a LaTeX (or plain ``x**2``-style) expression; ``None`` when it cannot be parsed."""
    text = latex.strip()
    if not text:
        return None
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)  # 1,000 inside an expression
    text = text.replace("%", "/100")
    if "\\" not in text:  # SymPy's plain-text spelling (pi/2, exp(16)) means the constant and functions
        text = _PLAIN_NAMES.sub(lambda m: "\\" + m.group(0), text)
    from latex2sympy2_extended import latex2sympy
    from latex2sympy2_extended.latex2sympy2 import ConversionConfig

    config = ConversionConfig(
        interpret_as_mixed_fractions=True,
        interpret_simple_eq_as_assignment=False,
        interpret_contains_as_eq=False,
        lowercase_symbols=False,
    )
    # Only the parsers sit inside the broad catches: they raise many types on text that is
    # not an expression, and that means "not parsable", not "SymPy crashed".
    try:
        parsed = latex2sympy(text, normalization_config=None, conversion_config=config)
    except Exception:  # ANTLR errors, LaTeXParsingError, TypeError, ...: not LaTeX
        pass
    else:
        return _defined(_evaluate_matrices(parsed))
    if "\\" in text:
        return None
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    try:
        parsed = parse_expr(
            text, transformations=(*standard_transformations, implicit_multiplication_application, convert_xor)
        )
    except Exception:  # SyntaxError, TokenError, TypeError, ...: not an expression
        return None
    return _defined(parsed)


def _defined(obj: Any) -> Any:
    """``None`` for a parse that contains a division by zero (``12:00`` read as 12/0)."""
    import sympy

    try:
        if obj.has(sympy.zoo, sympy.nan):
            return None
        # `\frac{1}{0}` parses unevaluated, as 1 * 0**-1
        if any(p.base == 0 and p.exp.is_negative for p in obj.atoms(sympy.Pow)):
            return None
    except (AttributeError, TypeError):
        pass
    return obj


def _evaluate_matrices(obj: Any) -> Any:
    """``A + B`` of explicit matrices comes back unevaluated; evaluate it."""
    import sympy

    if isinstance(obj, sympy.MatrixExpr) and not isinstance(obj, sympy.MatrixBase):
        obj = obj.doit()
        if isinstance(obj, sympy.MatrixExpr) and not isinstance(obj, sympy.MatrixBase):
            obj = obj.as_explicit()
    return obj


def objects_equal(a: Any, b: Any, float_rel_tol: float, points: int) -> bool:
    """Equality of two SymPy objects: expressions, matrices, finite sets, relations."""
    import sympy

    if isinstance(a, sympy.MatrixBase) or isinstance(b, sympy.MatrixBase):
        if not (isinstance(a, sympy.MatrixBase) and isinstance(b, sympy.MatrixBase)) or a.shape != b.shape:
            return False
        return all(objects_equal(x, y, float_rel_tol, points) for x, y in zip(a, b))
    if isinstance(a, sympy.FiniteSet) and isinstance(b, sympy.FiniteSet):
        if len(a) != len(b):
            return False
        rest = list(b)
        for x in a:
            match = next((y for y in rest if objects_equal(x, y, float_rel_tol, points)), None)
            if match is None:
                return False
            rest.remove(match)
        return True
    if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr)):
        return bool(a == b)
    return expressions_equal(a, b, float_rel_tol, points)


def expressions_equal(a: Any, b: Any, float_rel_tol: float, points: int) -> bool:
    import sympy

    a, b = _plain_symbols(a), _plain_symbols(b)
    if a == b:
        return True
    if any(e.has(sympy.oo, -sympy.oo, sympy.zoo) for e in (a, b)):
        return False  # infinities are only equal as the same object (a == b above)
    inexact = a.has(sympy.Float) or b.has(sympy.Float)
    free = sorted(a.free_symbols | b.free_symbols, key=lambda s: s.name)
    if not free:
        verdict = _numbers_close(a, b, float_rel_tol) if inexact else _exact_constants_equal(a, b)
    else:
        verdict = _agree_at_points(a, b, free, float_rel_tol if inexact else _EXACT_POINT_TOL, points, not inexact)
    if verdict is not None:
        return verdict
    return bool(sympy.simplify(a - b) == 0)  # a SymPy crash here propagates: the grade is an error


def relations_equal(gold: Relation, pred: Relation, float_rel_tol: float, points: int) -> bool:
    """``2x + 4y - 3 = 0`` equals ``y = -x/2 + 3/4``: both sides moved to one side, the
    two differences are a constant multiple of each other (positive for inequalities)."""

    g, p = _one_sided(gold), _one_sided(pred)
    if g is None or p is None or len(g) != len(p):
        return False
    for (g_expr, g_op), (p_expr, p_op) in zip(g, p):
        if g_op != p_op:
            return False
        if g_expr == 0 or p_expr == 0:
            if not (g_expr == 0 and p_expr == 0):
                return False
            continue
        ratio = _constant_ratio(g_expr, p_expr, float_rel_tol, points)
        if ratio is None or ratio == 0 or (g_op not in ("=", "\\ne") and ratio.real <= 0):
            return False
    return True


def _constant_ratio(a: Any, b: Any, float_rel_tol: float, points: int) -> complex | None:
    """The constant ``c`` with ``a = c * b`` (checked at random points), else ``None``."""
    import sympy

    free = sorted(a.free_symbols | b.free_symbols, key=lambda s: s.name)
    tol = float_rel_tol if (a.has(sympy.Float) or b.has(sympy.Float)) else _EXACT_POINT_TOL
    ratios = []
    for subs in _points(free, points, _has_bounded_operator(a, b)):
        x, y = _evaluate(a, subs), _evaluate(b, subs)
        if x is None or y is None:
            continue
        if x == 0 or y == 0:
            if x != y:
                return None
            continue
        ratios.append(x / y)
        if len(ratios) >= points:
            break
    if len(ratios) >= min(points, 2):
        first = ratios[0]
        return first if all(abs(r - first) <= tol * max(abs(r), abs(first)) for r in ratios) else None
    ratio = sympy.simplify(a / b)  # could not evaluate: ask SymPy (a crash propagates)
    if ratio.free_symbols or not ratio.is_number or ratio.has(sympy.zoo, sympy.nan):
        return None
    return complex(ratio)


def _one_sided(rel: Relation) -> list[tuple[Any, str]] | None:
    """Each link ``a op b`` as ``(a - b, op)`` with op in ``=``, ``<``, ``\\le``, ``\\ne``."""
    sides = [to_sympy(s) for s in rel.sides]
    if any(s is None or not hasattr(s, "free_symbols") for s in sides):
        return None
    sides = [_plain_symbols(s) for s in sides]
    links = []
    for left, op, right in zip(sides, rel.ops, sides[1:]):
        if op in (">", "\\ge"):
            left, right, op = right, left, "<" if op == ">" else "\\le"
        links.append((left - right, op))
    return links


def _plain_symbols(expr: Any) -> Any:
    """Replace every symbol by an assumption-free one of the same name, so ``x`` from
    two parsers (one real, one not) is the same variable."""
    import sympy

    try:
        mapping = {s: sympy.Symbol(s.name) for s in expr.free_symbols if isinstance(s, sympy.Symbol)}
        return expr.xreplace(mapping) if mapping else expr
    except AttributeError:
        return expr


def _exact_constants_equal(a: Any, b: Any) -> bool | None:
    """Two exact constants: equal when their difference is zero -- never "relatively
    small" (``2^{2005}`` != ``2^{2005} + 1``). A rational difference is decided exactly;
    otherwise SymPy's adaptive evaluation either certifies a non-zero difference or
    finds none at 50 digits (then they are equal, unless a side cannot be evaluated)."""
    try:
        difference = (a - b).doit()
        if difference.is_Rational:
            return bool(difference == 0)
        nonzero = _certainly_nonzero(difference.evalf(_DIGITS))
    except (TypeError, ValueError, AttributeError, ZeroDivisionError):
        return None
    if nonzero is None:
        return _mp_close(a, b, _EXACT_CONSTANT_TOL)
    return not nonzero


def _certainly_nonzero(value: Any) -> bool | None:
    """True when an evaluated difference is a number SymPy knows to be non-zero (a
    Float carrying real precision, or an exact non-zero number); False for zero or a
    precision-less zero from cancellation; None when it is not a number."""
    try:
        parts = value.as_real_imag()
    except (TypeError, ValueError, AttributeError):
        return None
    for part in parts:
        if not part.is_number:
            return None
        if part == 0:
            continue
        precision = getattr(part, "_prec", None)
        if precision is None or precision > 10:
            return True
    return False


def _numbers_close(a: Any, b: Any, tol: float) -> bool | None:
    try:
        x, y = complex(a.evalf(_DIGITS)), complex(b.evalf(_DIGITS))
    except (TypeError, ValueError, AttributeError):
        return _mp_close(a, b, tol)
    if any(v != v or abs(v) == float("inf") for v in (x, y)):  # nan / inf
        return _mp_close(a, b, tol)
    if x == 0 or y == 0 or min(abs(x), abs(y)) < 1e-250:  # outside double range: use mpmath
        return _mp_close(a, b, tol)
    return abs(x - y) <= tol * max(abs(x), abs(y))


def _mp_close(a: Any, b: Any, tol: float) -> bool | None:
    """The same relative test in SymPy's own arbitrary-precision numbers."""
    import sympy

    try:
        x, y = sympy.N(a, _DIGITS), sympy.N(b, _DIGITS)
        if not (x.is_number and y.is_number):
            return None
        if any(v.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo) for v in (x, y)):
            return bool(x == y) and not x.has(sympy.zoo, sympy.nan)  # oo = oo; zoo, nan equal nothing
        diff = abs(sympy.N(x - y, _DIGITS))
        scale = max(abs(x), abs(y))
        if scale == 0:
            return True
        return bool(diff <= sympy.Float(tol, _DIGITS) * scale)
    except (TypeError, ValueError, AttributeError):
        return None


def _agree_at_points(a: Any, b: Any, free: list[Any], tol: float, points: int, exact: bool) -> bool | None:
    """Compare at seeded random points; None when too few points give finite numbers.

    For exact expressions the difference itself is also evaluated (adaptively, so a
    small difference between huge values is still seen: ``x + 2^{2005}`` vs ``x + 2^{2005} + 1``)."""
    checked = 0
    for subs in _points(free, points, _has_bounded_operator(a, b)):
        x, y = _evaluate(a, subs), _evaluate(b, subs)
        if x is None or y is None:
            continue
        if abs(x - y) > tol * max(abs(x), abs(y), 1e-300):
            return False
        if exact:
            try:
                if _certainly_nonzero((a - b).evalf(30, subs=subs)):
                    return False
            except (TypeError, ValueError, AttributeError, ZeroDivisionError):
                pass
        checked += 1
        if checked >= points:
            return True
    return None


def _points(free: list[Any], points: int, integers: bool = False) -> Any:
    """Random rational points in [0.5, 2.5] -- or small integers, for sums and products
    whose bounds are symbols. A fixed seed per set of names keeps verdicts reproducible."""
    rng = random.Random(",".join(s.name for s in free))
    for _ in range(points * 2):
        if integers:
            yield {s: rng.randint(2, 7) for s in free}
        else:
            yield {s: sympy_rational(rng.uniform(0.5, 2.5)) for s in free}


def _has_bounded_operator(*exprs: Any) -> bool:
    import sympy

    return any(e.has(sympy.Sum, sympy.Product) for e in exprs)


def _evaluate(expr: Any, subs: dict[Any, Any]) -> complex | None:
    try:
        value = complex(expr.evalf(30, subs=subs))
    except (TypeError, ValueError, AttributeError, ZeroDivisionError):
        return None
    if value != value or abs(value) == float("inf"):
        return None
    return value


def sympy_rational(value: float) -> Any:
    import sympy

    return sympy.Rational(round(value * 1000), 1000)
