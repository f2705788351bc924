"""Parse a normalised answer string into a small structure tree, without SymPy.

The tree says what the answer *is*, so the grader can compare like with like:

* :class:`Leaf`     -- one expression or number, kept as a LaTeX string
* :class:`Seq`      -- ``tuple`` (``(1, 2)``, order matters), ``set`` (``\\{1, 2\\}``) or
  ``list`` (``1, 2`` / ``1 and 2``; order does not matter)
* :class:`Interval` -- ``[a, b)``; bracket types matter
* :class:`SetUnion` -- ``A \\cup B``
* :class:`Labeled`  -- ``x = 3``, ``f(x) = 2x+1``, ``x \\in [0, 1]``: a name and its value
* :class:`Relation` -- a genuine equation or inequality (``2x + 4y = 3``, ``x \\le 5``)
* :class:`Matrix`   -- ``\\begin{pmatrix}...\\end{pmatrix}`` and friends

Leaves are only turned into SymPy objects by :mod:`rewards.math.symbolic`, in a
worker process with a time limit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from rewards.math.normalize import normalize
from rewards.math.numbers import decimal_comma_reading, parse_number


@dataclass(frozen=True)
class Leaf:
    text: str


@dataclass(frozen=True)
class Seq:
    kind: str  # "tuple" (ordered) | "set" | "list" | "pm" (the values of a +- b)
    items: tuple[Node, ...]
    alt: Node | None = None  # another reading of the same text: `1,22` may be the number 1.22


@dataclass(frozen=True)
class Interval:
    left_closed: bool
    lo: Node
    hi: Node
    right_closed: bool


@dataclass(frozen=True)
class SetUnion:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Labeled:
    label: str
    value: Node


@dataclass(frozen=True)
class Relation:
    sides: tuple[str, ...]
    ops: tuple[str, ...]  # "=", "<", "\\le", ">", "\\ge", "\\ne"


@dataclass(frozen=True)
class Matrix:
    rows: tuple[tuple[Node, ...], ...]
    source: str = ""  # the normalised LaTeX, for SymPy when the other side is a matrix expression


Node = Leaf | Seq | Interval | SetUnion | Labeled | Relation | Matrix

_OPEN, _CLOSE = "([{", ")]}"
_MATRIX_RE = re.compile(
    r"^\[?\s*\\begin\{(?P<env>[pbvBV]?matrix|array|smallmatrix)\}(?:\{[^{}]*\})?(?P<body>.*)\\end\{(?P=env)\}\s*\]?$",
    re.DOTALL,
)
# "and"/"or" between items; also glued where spaces were lost (`W(x)=1orW(x)=-1`).
_WORD_SEP_RE = re.compile(r"(?<![A-Za-z\\])(?:and|or)(?![A-Za-z])|(?<=[\d)])(?:and|or)(?=[A-Z(\\])")
_RELATION_RE = re.compile(r"\\le(?![a-zA-Z])|\\ge(?![a-zA-Z])|\\ne(?![a-zA-Z])|\\approx(?![a-zA-Z])|\\in(?![a-zA-Z])|=|<|>")
_IN_RE = re.compile(r"^([^=<>]*?)\\in(?![a-zA-Z])(.*)$", re.DOTALL)
_PERCENT_WORDS = {"percent", "percentage", "pct"}
_UNIT_TAIL_RE = re.compile(r"\s+([A-Za-z]{2,}|[A-Za-z]{1,3}\s*(?:\^\s*\{?\s*[23]\s*\}?|[²³]))$")
_GLUED_UNIT_RE = re.compile(r"(?<=\d)\s*(?:[kcm]?m|[kcm]?m[²³]|[kcm]?g|km/h|m/s|s|h|min)[²³]?$")
_LABEL_STRIP_RE = re.compile(r"\\[a-zA-Z]+|_\{[^{}]*\}|_[A-Za-z0-9]|[{}()\[\],|:'\s]")


def parse_answer(answer: str) -> Node | None:
    """Normalise ``answer`` and parse it; ``None`` for an empty answer."""
    s = normalize(answer)
    return _parse(s, 0) if s else None


def _parse(s: str, depth: int) -> Node | None:
    s = s.strip()
    if not s:
        return None
    if depth > 12:
        return Leaf(s)
    matrix = _matrix(s, depth)
    if matrix is not None:
        return matrix
    for separator in (";", _WORD_SEP_RE):
        parts = split_top(s, separator)
        if len(parts) > 1:
            return _seq("list", parts, depth)
    if parse_number(_strip_units(s)) is not None:
        return Leaf(_strip_units(s))
    parts = split_top(s, ",")
    if len(parts) > 1:
        seq = _seq("list", parts, depth)
        decimal = decimal_comma_reading(s)
        if decimal is not None and isinstance(seq, Seq):
            return Seq(seq.kind, seq.items, Leaf(decimal))
        return seq
    named = _IN_RE.match(s)
    if named is not None and is_label(named.group(1)):
        value = _parse(named.group(2), depth + 1)
        return Labeled(named.group(1).strip(), value) if value is not None else None
    parts = split_top(s, re.compile(r"\\cup(?![a-zA-Z])"))
    if len(parts) > 1:
        nodes = (_parse(p, depth + 1) for p in parts)
        # Inside a union, (a, b) is an open interval, not a pair.
        return SetUnion(tuple(_as_interval(n) for n in nodes if n is not None))
    relation = _relation(s, depth)
    if relation is not None:
        return relation
    bracketed = _bracketed(s, depth)
    if bracketed is not None:
        return bracketed
    if "\\pm" in s or "\\mp" in s:
        variants = _plus_minus(s)
        if len(variants) > 1:
            return Seq("pm", tuple(Leaf(_strip_units(v)) for v in variants))
    return Leaf(_strip_units(s))


def _seq(kind: str, parts: list[str], depth: int) -> Node | None:
    nodes = _flatten_pm(n for n in (_parse(p, depth + 1) for p in parts) if n is not None)
    # `21, 16 or 11` is one list of three; but `p=5, q=2; p=7, q=2` keeps its two records.
    flat: list[Node] = []
    for n in nodes:
        nested = isinstance(n, Seq) and n.kind == "list" and not all(isinstance(i, Labeled) for i in n.items)
        flat.extend(n.items if nested else (n,))  # type: ignore[union-attr]
    nodes = tuple(flat)
    if not nodes:
        return None
    return nodes[0] if len(nodes) == 1 and kind == "list" else Seq(kind, nodes)


def _flatten_pm(nodes: Iterable[Node]) -> tuple[Node, ...]:
    """In a set or list, the two values of ``a \\pm b`` are two more members."""
    flat: list[Node] = []
    for n in nodes:
        flat.extend(n.items if isinstance(n, Seq) and n.kind == "pm" else (n,))
    return tuple(flat)


def _as_interval(node: Node) -> Node:
    if isinstance(node, Seq) and node.kind == "tuple" and len(node.items) == 2:
        return Interval(False, node.items[0], node.items[1], False)
    return node


def split_top(s: str, separator: str | re.Pattern[str]) -> list[str]:
    """Split ``s`` at ``separator`` where it is outside every bracket pair.

    Brackets of any kind count alike, so half-open intervals like ``[0, 1)`` nest."""
    pattern = separator if isinstance(separator, re.Pattern) else re.compile(re.escape(separator))
    depth_at = _depths(s)
    parts, last = [], 0
    for m in pattern.finditer(s):
        if depth_at[m.start()] == 0:
            parts.append(s[last : m.start()])
            last = m.end()
    parts.append(s[last:])
    return [p.strip() for p in parts] if len(parts) > 1 else [s]


def _depths(s: str) -> list[int]:
    depths, depth = [], 0
    for ch in s:
        if ch in _CLOSE:
            depth = max(0, depth - 1)
        depths.append(depth)
        if ch in _OPEN:
            depth += 1
    return depths


def _closing_index(s: str, start: int) -> int:
    depth = 0
    for i in range(start, len(s)):
        if s[i] in _OPEN:
            depth += 1
        elif s[i] in _CLOSE:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _matrix(s: str, depth: int) -> Matrix | None:
    m = _MATRIX_RE.match(s)
    if m is None or "\\begin" in m.group("body"):
        return None
    rows = []
    for row in re.split(r"\\\\", m.group("body")):
        if not row.strip() or row.strip() == "\\hline":
            continue
        rows.append(tuple(_parse(cell, depth + 1) or Leaf("") for cell in row.split("&")))
    if not rows or len({len(r) for r in rows}) != 1:
        return None
    return Matrix(tuple(rows), s)


def is_label(s: str) -> bool:
    """True for a name on the left of ``=``: ``x``, ``f(x)``, ``a_{37}``, ``(p, q)``,
    ``|AB|``, ``V_1:V_2``, ``\\frac{NO}{BO}`` -- not an expression like ``2x + z``."""
    t = s.strip()
    if not t or t[0].isdigit() or parse_number(t) is not None:
        return False
    if re.search(r"[+\-^=<>*/]|\\(?:sqrt|sum|int|prod|lim|cdot|times|pm)(?![a-zA-Z])", t):
        return False
    rest = _LABEL_STRIP_RE.sub("", t)
    return rest.isalpha() or (rest == "" and "\\" in t)


def _relation(s: str, depth: int) -> Node | None:
    depth_at = _depths(s)
    matches = [m for m in _RELATION_RE.finditer(s) if depth_at[m.start()] == 0]
    if not matches:
        return None
    sides, ops, last = [], [], 0
    for m in matches:
        sides.append(s[last : m.start()].strip())
        ops.append(m.group(0))
        last = m.end()
    sides.append(s[last:].strip())
    if any(not side for side in sides):
        return None
    # `x \approx 11`: a name; `1/3 \approx 0.33`: the exact value before the approximation.
    while "\\approx" in ops:
        i = ops.index("\\approx")
        if i == 0 and is_label(sides[0]):
            ops[0] = "="
        else:
            sides, ops = sides[: i + 1], ops[:i]
    if not ops:
        return _parse(sides[0], depth + 1)
    if ops == ["\\in"] and is_label(sides[0]):
        value = _parse(sides[1], depth + 1)
        return Labeled(sides[0], value) if value is not None else None
    if all(op == "=" for op in ops):
        value = _parse(sides[-1], depth + 1)
        if value is None:
            return None
        if is_label(sides[0]):
            return Labeled(sides[0], value)
        if len(sides) > 2 or not (_has_variable(sides[0]) or _has_variable(sides[1])):
            return value  # a chain of equalities, or `1 + 1 = 2`: the last side is the result
        return Relation(tuple(sides), tuple(ops))
    interval = _chain_interval(sides, ops, depth)
    if interval is not None:
        return interval
    return Relation(tuple(sides), tuple(ops))


def _chain_interval(sides: list[str], ops: list[str], depth: int) -> Node | None:
    """``a < x \\le b`` (with ``x`` a name) is the interval ``(a, b]``."""
    if len(sides) != 3 or not is_label(sides[1]):
        return None
    lower, upper = {"<": False, "\\le": True}, {">": False, "\\ge": True}
    if ops[0] in lower and ops[1] in lower:
        lo, hi, closed = sides[0], sides[2], (lower[ops[0]], lower[ops[1]])
    elif ops[0] in upper and ops[1] in upper:
        lo, hi, closed = sides[2], sides[0], (upper[ops[1]], upper[ops[0]])
    else:
        return None
    lo_node, hi_node = _parse(lo, depth + 1), _parse(hi, depth + 1)
    if lo_node is None or hi_node is None:
        return None
    absolute = re.fullmatch(r"\|(.+)\|", sides[1].strip())
    low = parse_number(lo)
    if absolute is not None and low is not None and low.value >= 0:
        # a <= |x| <= b with a >= 0: x in [-b, -a] U [a, b]
        negative = Interval(closed[1], Leaf(_negate(hi)), Leaf(_negate(lo)), closed[0])
        both = SetUnion((negative, Interval(closed[0], lo_node, hi_node, closed[1])))
        return Labeled(absolute.group(1), both)
    return Labeled(sides[1], Interval(closed[0], lo_node, hi_node, closed[1]))


def _negate(expr: str) -> str:
    expr = expr.strip()
    if expr.startswith("-") and not re.search(r"[+\-]", expr[1:]):
        return expr[1:]
    return "-" + expr if not re.search(r"[+\-]", expr) else "-(" + expr + ")"


def _has_variable(expr: str) -> bool:
    """Letters outside LaTeX command names (``\\frac``, ``\\sqrt``, ``\\pi``)."""
    return bool(re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", expr)))


def _bracketed(s: str, depth: int) -> Node | None:
    if s.startswith("\\{") and s.endswith("\\}"):
        inner = s[2:-2]
        parts = split_top(inner, ",") if inner.strip() else []
        return Seq("set", _flatten_pm(n for n in (_parse(p, depth + 1) for p in parts) if n is not None))
    if not (s[0] in "([" and s[-1] in ")]" and _closing_index(s, 0) == len(s) - 1):
        return None
    inner = s[1:-1]
    parts = split_top(inner, ",")
    if len(parts) == 1:
        parts = split_top(inner, ";")  # (0; -2; 6): a tuple written with semicolons
    if len(parts) == 1:
        if s[0] == "(" and s[-1] == ")" and re.fullmatch(r"[A-Z]", inner.strip()):  # a choice "(C)"
            return Leaf(inner.strip())
        return _parse(inner, depth + 1) if s[0] == "(" and s[-1] == ")" else None
    if len(parts) == 2 and (s[0] == "[" or s[-1] == "]"):
        lo, hi = _parse(parts[0], depth + 1), _parse(parts[1], depth + 1)
        if lo is None or hi is None:
            return None
        return Interval(s[0] == "[", lo, hi, s[-1] == "]")
    if s[0] == "(" and s[-1] == ")":
        return Seq("tuple", tuple(_parse(p, depth + 1) or Leaf("") for p in parts))
    return None


def _plus_minus(s: str) -> list[str]:
    """``1 \\pm \\sqrt{2}`` -> ``[1 + \\sqrt{2}, 1 - \\sqrt{2}]`` (at most two signs)."""
    variants = [s]
    for _ in range(2):
        expanded = []
        for v in variants:
            m = re.search(r"\\(pm|mp)(?![a-zA-Z])", v)
            if m is None:
                expanded.append(v)
                continue
            first, second = ("+", "-") if m.group(1) == "pm" else ("-", "+")
            expanded += [v[: m.start()] + first + v[m.end() :], v[: m.start()] + second + v[m.end() :]]
        variants = expanded
    return [v.strip() for v in variants]


def _strip_units(s: str) -> str:
    """``125 miles`` -> ``125``; ``28 percent`` -> ``28%``; ``15 cm^2`` -> ``15``.

    Only trailing words after something that ends in a digit, ``}`` or ``)`` are
    dropped, so variables and text answers (``odd``, ``Evelyn``) stay."""
    percent = False
    for _ in range(4):
        m = _UNIT_TAIL_RE.search(s)
        if m is None or not re.search(r"[\d})%]\s*$", s[: m.start()]):
            break
        percent = percent or m.group(1).lower() in _PERCENT_WORDS
        s = s[: m.start()].rstrip()
    m = re.search(r"(?<=[\d}])\s*(percent(?:age)?|pct)$", s)
    if m:
        percent, s = True, s[: m.start()].rstrip()
    m = _GLUED_UNIT_RE.search(s)
    if m and parse_number(s[: m.start()]) is not None:
        s = s[: m.start()].rstrip()
    return s + "%" if percent and not s.endswith("%") else s
