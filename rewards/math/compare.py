"""Compare two parsed answers, structure by structure; the gold answer decides.

``compare(gold, pred, cmp)`` walks the two trees from :mod:`rewards.math.parse`:

* a tuple in the gold is ordered; a set or a bare list is matched in any order;
* an interval needs the same bracket types (``(a, b)`` in the gold is also a pair);
* ``x = 3`` against ``3``: the name is dropped; a genuine equation such as
  ``2x + 4y = 3`` is only equal to an equivalent equation;
* leaves and relations are handed to ``cmp``, a :class:`Comparer`.

Every answer is three-valued: ``True``, ``False`` or ``None`` ("cannot tell without
SymPy"). The cheap :class:`Comparer` here never imports SymPy; the SymPy one in
:mod:`rewards.math.symbolic` answers every leaf, so its verdict is never ``None``.
"""

from __future__ import annotations

import re

from rewards.math.normalize import compact
from rewards.math.numbers import numbers_equal, parse_number
from rewards.math.parse import (
    Interval,
    Labeled,
    Leaf,
    Matrix,
    Node,
    Relation,
    Seq,
    SetUnion,
    is_label,
)

Verdict = bool | None
_WORDS_RE = re.compile(r"[A-Za-z][A-Za-z '\-]*")
_MAX_ITEMS = 64  # longer lists are compared in order only: matching costs n^2 comparisons


class Comparer:
    """Leaf and relation comparison without SymPy: strings, numbers, words."""

    def __init__(self, float_rel_tol: float = 1e-6) -> None:
        self.float_rel_tol = float_rel_tol

    def leaf(self, gold: str, pred: str) -> Verdict:
        if compact(gold) == compact(pred):
            return True
        g_base, p_base = _base_literal(gold), _base_literal(pred)
        if g_base is not None or p_base is not None:
            return g_base == p_base  # `204_5`: digits and base must both match
        g, p = parse_number(gold), parse_number(pred)
        if g is not None and p is not None:
            return numbers_equal(g, p, self.float_rel_tol)
        g_words, p_words = _is_words(gold), _is_words(pred)
        if g_words and p_words:
            if compact(gold).casefold() == compact(pred).casefold():
                return True
            return None if min(len(gold), len(pred)) <= 2 else False
        if (g_words and p is not None and len(gold) > 2) or (p_words and g is not None and len(pred) > 2):
            return False  # a word is never a number
        return None

    def relation(self, gold: Relation, pred: Relation) -> Verdict:
        if _relation_key(gold) == _relation_key(pred) or _relation_key(gold) == _relation_key(_flip(pred)):
            return True
        return None

    def matrix_expression(self, gold: Node, pred: Node) -> Verdict:
        """A matrix against a leaf that may be a matrix expression (``A + B``)."""
        return None


def compare(gold: Node, pred: Node, cmp: Comparer) -> Verdict:
    """Is ``pred`` equivalent to ``gold``? ``None`` when ``cmp`` could not decide a leaf."""
    # Names: `x = 3` vs `3`, `(p, q) = (3, 2)` vs `(3, 2)`; but keep equations whole
    # when the other side is an equation too.
    if isinstance(gold, Labeled) and isinstance(pred, Labeled):
        return compare(gold.value, pred.value, cmp)
    if isinstance(gold, Relation) and isinstance(pred, Labeled) and isinstance(pred.value, Leaf):
        return cmp.relation(gold, Relation((pred.label, pred.value.text), ("=",)))
    if isinstance(pred, Relation) and isinstance(gold, Labeled) and isinstance(gold.value, Leaf):
        return cmp.relation(Relation((gold.label, gold.value.text), ("=",)), pred)
    if isinstance(gold, Labeled):
        return compare(gold.value, pred, cmp)
    if isinstance(pred, Labeled):
        return compare(gold, pred.value, cmp)

    # `1,22`: a list, or the number 1.22 when the other side is one number.
    if isinstance(gold, Seq) and gold.alt is not None and not isinstance(pred, Seq):
        return compare(gold.alt, pred, cmp)
    if isinstance(pred, Seq) and pred.alt is not None and not isinstance(gold, Seq):
        return compare(gold, pred.alt, cmp)
    # `15\frac{39}{40}` or `\frac{639}{40}`: a list of one value written twice is that value.
    if isinstance(gold, Seq) != isinstance(pred, Seq):
        seq, other = (gold, pred) if isinstance(gold, Seq) else (pred, gold)
        assert isinstance(seq, Seq)
        if seq.kind in ("list", "set") and len(_distinct(seq.items, cmp)) == 1:
            single = seq.items[0]
            return compare(single, other, cmp) if seq is gold else compare(other, single, cmp)

    if isinstance(gold, Relation) or isinstance(pred, Relation):
        return _compare_relation(gold, pred, cmp)
    if isinstance(gold, Leaf) and isinstance(pred, Leaf):
        return cmp.leaf(gold.text, pred.text)
    if isinstance(gold, Matrix) or isinstance(pred, Matrix):
        return _compare_matrix(gold, pred, cmp)
    if isinstance(gold, SetUnion) or isinstance(pred, SetUnion):
        g_parts = gold.parts if isinstance(gold, SetUnion) else (gold,)
        p_parts = pred.parts if isinstance(pred, SetUnion) else (pred,)
        return _unordered(g_parts, p_parts, cmp)
    if isinstance(gold, Interval) or isinstance(pred, Interval):
        return _compare_interval(gold, pred, cmp)
    if isinstance(gold, Seq) and isinstance(pred, Seq):
        return _compare_seq(gold, pred, cmp)
    return False  # a single value against several, a tuple against a number, ...


def _compare_relation(gold: Node, pred: Node, cmp: Comparer) -> Verdict:
    if isinstance(gold, Relation) and isinstance(pred, Relation):
        return cmp.relation(gold, pred)
    # `x \ge 2` against `[2, \infty)`
    relation, other = (gold, pred) if isinstance(gold, Relation) else (pred, gold)
    assert isinstance(relation, Relation)
    interval = relation_as_interval(relation)
    if interval is not None and isinstance(other, (Interval, Seq)):
        return compare(interval, other, cmp) if relation is gold else compare(other, interval, cmp)
    return False


def relation_as_interval(rel: Relation) -> Interval | None:
    """``x < 3`` -> ``(-\\infty, 3)``; ``x \\ge a`` -> ``[a, \\infty)`` (one side a name)."""
    if len(rel.ops) != 1 or rel.ops[0] in ("=", "\\ne"):
        return None
    left, right = rel.sides
    op = rel.ops[0]
    if is_label(right) and not is_label(left):
        left, right, op = right, left, _FLIP[op]
    if not is_label(left):
        return None
    bound = Leaf(right)
    inf, minus_inf = Leaf("\\infty"), Leaf("-\\infty")
    if op in ("<", "\\le"):
        return Interval(False, minus_inf, bound, op == "\\le")
    return Interval(op == "\\ge", bound, inf, False)


_FLIP = {"<": ">", ">": "<", "\\le": "\\ge", "\\ge": "\\le", "=": "=", "\\ne": "\\ne"}


def _flip(rel: Relation) -> Relation:
    return Relation(tuple(reversed(rel.sides)), tuple(_FLIP.get(op, op) for op in reversed(rel.ops)))


def _relation_key(rel: Relation) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(compact(s) for s in rel.sides), rel.ops


def _compare_matrix(gold: Node, pred: Node, cmp: Comparer) -> Verdict:
    if isinstance(gold, Matrix) and isinstance(pred, Matrix):
        if len(gold.rows) != len(pred.rows) or len(gold.rows[0]) != len(pred.rows[0]):
            return False
        return _all(compare(g, p, cmp) for gr, pr in zip(gold.rows, pred.rows) for g, p in zip(gr, pr))
    if isinstance(gold, Leaf) or isinstance(pred, Leaf):
        return cmp.matrix_expression(gold, pred)
    return False


def _compare_interval(gold: Node, pred: Node, cmp: Comparer) -> Verdict:
    g, p = _as_interval(gold), _as_interval(pred)
    if g is None or p is None:
        return False
    if (g.left_closed, g.right_closed) != (p.left_closed, p.right_closed):
        return False
    return _all((compare(g.lo, p.lo, cmp), compare(g.hi, p.hi, cmp)))


def _as_interval(node: Node) -> Interval | None:
    if isinstance(node, Interval):
        return node
    if isinstance(node, Seq) and node.kind == "tuple" and len(node.items) == 2:
        return Interval(False, node.items[0], node.items[1], False)
    return None


def _compare_seq(gold: Seq, pred: Seq, cmp: Comparer) -> Verdict:
    g_items, p_items = gold.items, pred.items
    if len(g_items) != len(p_items) and gold.kind == "tuple":
        return False
    by_label = _by_label(g_items, p_items, cmp)
    if by_label is not None:
        return by_label
    ordered = gold.kind == "tuple" or _is_record(g_items) or len(g_items) > _MAX_ITEMS
    if ordered and len(g_items) != len(p_items):
        return False
    if ordered:
        return _all(compare(g, p, cmp) for g, p in zip(g_items, p_items))
    return _unordered(g_items, p_items, cmp)


def _is_record(items: tuple[Node, ...]) -> bool:
    """``AB = 4, CD = 5``: every item named, all names different -> an ordered record."""
    labels = [compact(i.label) for i in items if isinstance(i, Labeled)]
    return len(labels) == len(items) and len(set(labels)) == len(labels)


def _by_label(g_items: tuple[Node, ...], p_items: tuple[Node, ...], cmp: Comparer) -> Verdict:
    """Two records with the same names compare name by name, in any order."""
    if not (_is_record(g_items) and _is_record(p_items)):
        return None
    g = {compact(i.label): i.value for i in g_items if isinstance(i, Labeled)}
    p = {compact(i.label): i.value for i in p_items if isinstance(i, Labeled)}
    if set(g) != set(p):
        return None
    return _all(compare(g[k], p[k], cmp) for k in g)


def _unordered(g_items: tuple[Node, ...], p_items: tuple[Node, ...], cmp: Comparer) -> Verdict:
    """A perfect matching of gold and predicted items: True if one exists using only
    equal pairs, False if none exists even counting undecided pairs, else None."""
    if len(g_items) != len(p_items):
        # A list of solutions that repeats one is still the same set of solutions.
        g_items, p_items = _distinct(g_items, cmp), _distinct(p_items, cmp)
        if len(g_items) != len(p_items):
            return False
    n = len(g_items)
    if n > _MAX_ITEMS:  # n^2 comparisons would be too many: compare in order
        return _all(compare(g, p, cmp) for g, p in zip(g_items, p_items))
    verdicts = [[compare(g, p, cmp) for p in p_items] for g in g_items]
    if _has_matching(verdicts, n, accept=(True,)):
        return True
    if _has_matching(verdicts, n, accept=(True, None)):
        return None
    return False


def _distinct(items: tuple[Node, ...], cmp: Comparer) -> tuple[Node, ...]:
    """``items`` without later repeats of an earlier item (decided cheaply, without SymPy)."""
    if len(items) > _MAX_ITEMS:
        return items
    kept: list[Node] = []
    for item in items:
        if not any(item == k or compare(k, item, Comparer(cmp.float_rel_tol)) is True for k in kept):
            kept.append(item)
    return tuple(kept)


def _has_matching(verdicts: list[list[Verdict]], n: int, accept: tuple[Verdict, ...]) -> bool:
    match_of_pred: list[int] = [-1] * n

    def augment(g: int, seen: list[bool]) -> bool:
        for p in range(n):
            if verdicts[g][p] in accept and not seen[p]:
                seen[p] = True
                if match_of_pred[p] < 0 or augment(match_of_pred[p], seen):
                    match_of_pred[p] = g
                    return True
        return False

    return all(augment(g, [False] * n) for g in range(n))


def _all(verdicts: object) -> Verdict:
    """Three-valued AND: False wins, then None."""
    unknown = False
    for v in verdicts:  # type: ignore[attr-defined]
        if v is False:
            return False
        if v is None:
            unknown = True
    return None if unknown else True


_BASE_RE = re.compile(r"^\s*([+-]?[0-9A-Za-z.]+)\s*_\s*\{?\s*(\d+)\s*\}?\s*$")


def _base_literal(s: str) -> tuple[str, int] | None:
    """``1112112_3`` -> ``("1112112", 3)``: a numeral in another base (SymPy would drop the base)."""
    m = _BASE_RE.match(s)
    if m is None or not any(ch.isdigit() for ch in m.group(1)):
        return None
    return m.group(1).upper(), int(m.group(2))


def _is_words(s: str) -> bool:
    return bool(_WORDS_RE.fullmatch(s.strip())) and "\\" not in s
